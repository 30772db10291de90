//! Authentication (SCRAM-SHA-256) and authorization (ACLs per principal, topic pattern and
//! operation), shared by both listeners, the client and the CLI.
//!
//! Why its own layer: a lease grant fences the current writer, so who may send which request is
//! a safety question, not only an access question; and the two listeners must answer it the same
//! way. The listeners keep a [`ConnectionAuthentication`] per connection and ask the same
//! [`Security`] (through an [`Access`]) before they call the broker service. The broker below
//! knows nothing of principals. `docs/security.md` has the threat model and the decisions.
//!
//! * [`scram`]: the SCRAM-SHA-256 messages and both sides of the exchange.
//! * [`users`], [`acl`]: the two files in the data directory and the CLI's changes to them.
//! * [`acl_store`]: where a running server reads and changes its ACLs (a client's request).
//! * [`files`]: atomic, lock-serialized writes and the server's live reload.
//! * [`live`]: users and ACLs kept current by another component (a cluster's, from etcd).
//! * [`authorizer`]: [`Security`] (the server's view) and [`Access`] (one connection's rights).
//! * [`connection`]: one connection's authentication state machine.

pub mod acl;
pub mod acl_store;
pub mod authorizer;
pub mod connection;
pub mod files;
pub mod live;
pub mod scram;
pub mod users;

pub use acl::{AclEntry, AclFile, Operation, TopicPattern};
pub use acl_store::{AclStore, AclStoreError, AclStoreFuture, FileAclStore};
pub use authorizer::{Access, NotAuthorized, Security, SecurityStore};
pub use connection::{AuthenticationError, ConnectionAuthentication, MAX_AUTHENTICATION_FAILURES};
pub use files::SecurityFileError;
pub use live::LiveSecurity;
pub use scram::{ClientExchange, ScramCredential, ScramError, MECHANISM};
