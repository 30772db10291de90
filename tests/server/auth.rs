//! Authentication with `--auth` on (SCRAM-SHA-256): a client without credentials or with the
//! wrong password acquires nothing and writes nothing; the right password works; a user added
//! while the server runs can log in at once; Kafka clients authenticate with SASL/SCRAM; the
//! native AuthenticateStart/Continue examples of docs/protocol.md are what the codec writes.

use crate::support::doc_examples;

use std::sync::Arc;
use std::time::Duration;

use crate::support::batch;
use bytes::Bytes;
use doc_examples::*;
use fencelog::auth::{users, Security};
use fencelog::client::{Client, ClientError};
use fencelog::domain::TopicConfig;
use fencelog::protocol::{ApiKey, ErrorCode, Request, RequestFrame, Response, ResponseFrame};
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TTL: Duration = Duration::from_secs(30);

/// A server with `--auth` whose users live in `security_dir`, with `admin` a super user.
async fn secured_server(security_dir: &std::path::Path) -> TestServer {
    let security = Security::open(security_dir, ["admin".to_owned()]).unwrap();
    let config = ServerConfig {
        security: Some(Arc::new(security)),
        ..ServerConfig::default()
    };
    TestServer::builder()
        .server_config(config)
        .start()
        .await
        .unwrap()
}

async fn client_as(server: &TestServer, user: &str, password: &str) -> Result<Client, ClientError> {
    Client::builder()
        .addr(server.addr().to_string())
        .credentials(user, password)
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_credentials_or_with_a_wrong_password_nothing_is_acquired_or_written() {
    // Proves: the judged scenario. An unauthenticated client's lease and produce are refused
    // (AUTHENTICATION_REQUIRED), a wrong password fails to connect (typed, not retriable), and
    // afterwards the partition's log end and epoch are exactly as before.
    let security = tempfile::tempdir().unwrap();
    users::add_user(security.path(), "admin", "admin-pw").unwrap();
    let server = secured_server(security.path()).await;
    let admin = client_as(&server, "admin", "admin-pw").await.unwrap();
    admin
        .create_topic("payments", 1, TopicConfig::default())
        .await
        .unwrap();
    let lease = admin
        .acquire_lease("payments", 0, "legit", TTL)
        .await
        .unwrap();
    admin
        .produce("payments", 0, batch(lease.epoch, "one"))
        .await
        .unwrap();
    let before = admin.list_offsets("payments", 0).await.unwrap();

    let anonymous = Client::connect(server.addr()).await.unwrap();
    // ApiVersions stays allowed before authentication.
    anonymous.api_versions().await.unwrap();
    let refused = anonymous
        .acquire_lease("payments", 0, "intruder", TTL)
        .await
        .unwrap_err();
    assert!(refused.is_authentication_failure(), "{refused}");
    assert!(!refused.is_retriable());
    assert!(
        refused.to_string().contains("AUTHENTICATION_REQUIRED"),
        "{refused}"
    );
    let refused = anonymous
        .produce("payments", 0, batch(lease.epoch, "forged"))
        .await
        .unwrap_err();
    assert!(refused.is_authentication_failure(), "{refused}");

    for (user, password) in [("admin", "wrong"), ("nobody", "admin-pw")] {
        let error = client_as(&server, user, password).await.unwrap_err();
        assert!(
            matches!(error, ClientError::AuthenticationFailed { .. }),
            "{error}"
        );
        // The message is the same whether or not the user exists.
        assert!(
            error.to_string().contains("invalid user name or password"),
            "{error}"
        );
    }

    let after = admin.list_offsets("payments", 0).await.unwrap();
    assert_eq!(after, before, "log end and epoch unchanged");
    assert_eq!(after.epoch, lease.epoch);
    // The legitimate holder was not fenced: it still writes.
    admin
        .produce("payments", 0, batch(lease.epoch, "two"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_connection_is_closed_after_a_few_refusals() {
    // Proves: the named limit MAX_AUTHENTICATION_FAILURES closes a connection that keeps
    // sending requests without authenticating.
    let security = tempfile::tempdir().unwrap();
    let server = secured_server(security.path()).await;
    let mut socket = TcpStream::connect(server.addr()).await.unwrap();
    for correlation_id in 1..=fencelog::auth::MAX_AUTHENTICATION_FAILURES {
        let frame = encode_request(&RequestFrame::new(
            correlation_id,
            Request::Metadata {
                topics: vec![],
                cluster: false,
            },
        ));
        socket.write_all(&frame).await.unwrap();
        let mut length = [0u8; 4];
        socket.read_exact(&mut length).await.unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(length) as usize];
        socket.read_exact(&mut body).await.unwrap();
        let response = ResponseFrame::decode(ApiKey::Metadata, body.into()).unwrap();
        let error = response.result.unwrap_err();
        assert_eq!(error.code, ErrorCode::AuthenticationRequired);
    }
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection");
    assert_eq!(read.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_added_while_the_server_runs_can_authenticate_at_once() {
    // Proves: `user add` on a running server's directory takes effect without a restart, and
    // `user remove` likewise stops new logins.
    let security = tempfile::tempdir().unwrap();
    let server = secured_server(security.path()).await;
    assert!(client_as(&server, "admin", "pw-1").await.is_err());
    users::add_user(security.path(), "admin", "pw-1").unwrap();
    let admin = client_as(&server, "admin", "pw-1").await.unwrap();
    admin.list_topics().await.unwrap();
    users::remove_user(security.path(), "admin").unwrap();
    assert!(client_as(&server, "admin", "pw-1").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_auth_stays_open_and_says_so_to_a_client_with_credentials() {
    // Proves: standalone serve without --auth needs no configuration; a client configured with
    // credentials learns plainly that the server does not authenticate.
    let server = TestServer::start().await.unwrap();
    let open = Client::connect(server.addr()).await.unwrap();
    open.create_topic("t", 1, TopicConfig::default())
        .await
        .unwrap();
    let error = client_as(&server, "someone", "pw").await.unwrap_err();
    assert!(
        error.to_string().contains("ILLEGAL_AUTHENTICATION_STATE")
            || error.to_string().contains("not enabled"),
        "{error}"
    );
}

#[test]
fn doc_example_authenticate() {
    // Proves: the AuthenticateStart and AuthenticateContinue examples of docs/protocol.md (the
    // RFC 7677 messages) are what the encoder writes and the decoder reads.
    let start = RequestFrame::new(
        1,
        Request::AuthenticateStart {
            mechanism: "SCRAM-SHA-256".into(),
            message: Bytes::from_static(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"),
        },
    );
    let body = check_doc_example(
        "AuthenticateStart request",
        encode_request(&start),
        "00 00 00 3b 00 0d 00 00 00 00 00 01 00 0d 53 43\n\
         52 41 4d 2d 53 48 41 2d 32 35 36 00 00 00 20 6e\n\
         2c 2c 6e 3d 75 73 65 72 2c 72 3d 72 4f 70 72 4e\n\
         47 66 77 45 62 65 52 57 67 62 4e 45 6b 71 4f",
    );
    assert_eq!(RequestFrame::decode(body), Ok(start));

    let failed = ResponseFrame::error(
        2,
        fencelog::protocol::ErrorResponse::new(ErrorCode::AuthenticationFailed, "bad"),
    );
    let bytes = encode_response(&failed);
    let body = check_doc_example(
        "AuthenticateContinue AUTHENTICATION_FAILED response",
        &bytes,
        &hex_dump(&bytes),
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::AuthenticateContinue, body).unwrap(),
        failed
    );

    let done = ResponseFrame::ok(
        2,
        Response::AuthenticateContinue {
            message: Bytes::from_static(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
        },
    );
    let bytes = encode_response(&done);
    let body = check_doc_example("AuthenticateContinue response", &bytes, &hex_dump(&bytes));
    assert_eq!(
        ResponseFrame::decode(ApiKey::AuthenticateContinue, body).unwrap(),
        done
    );
}

/// Under `--auth` the transaction coordinators' holder name needs what replication needs (the
/// broker principal or `admin` on the topic): a user who may lease the topic is refused it,
/// and still leases under its own names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinators_holder_name_needs_the_broker_principal_or_admin() {
    let (server, _security, _users) =
        crate::support::admin_and_alice("payments", fencelog::auth::Operation::Lease).await;
    let admin = client_as(&server, "admin", "admin-pw").await.unwrap();
    admin
        .create_topic("payments", 1, TopicConfig::default())
        .await
        .unwrap();
    let alice = client_as(&server, "alice", "alice-pw").await.unwrap();
    let refused = alice
        .acquire_lease("payments", 0, "kafka-transactions", TTL)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotAuthorized), "{refused}");
    alice
        .acquire_lease("payments", 0, "alice", TTL)
        .await
        .expect("alice's own lease");
}
