//! SCRAM-SHA-256 (RFC 5802 with the hash of RFC 7677): the stored credential, the messages of
//! the exchange, and both sides of it.
//!
//! Why written here rather than taken from a crate: the exchange is four short text messages, and
//! the crates that implement it either pull in an async runtime of their own or have not been
//! maintained for years. The cryptography itself comes from well-kept crates (`sha2`, `hmac`,
//! `pbkdf2`); this file only parses and builds the messages, and the unit tests check it against
//! the RFC 7677 test vector.
//!
//! The server never sees or stores the password: it keeps `salt`, `iterations`, `StoredKey =
//! H(HMAC(SaltedPassword, "Client Key"))` and `ServerKey = HMAC(SaltedPassword, "Server Key")`.
//! A stolen credential file lets nobody log in (the proof needs `ClientKey`, which `StoredKey`
//! does not reveal), but it does allow an offline guess of weak passwords: keep it private.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// The mechanism's name, as SASL and the native handshake spell it.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// Fewest PBKDF2 iterations accepted in a credential (RFC 7677's minimum, Kafka's too).
pub const MIN_ITERATIONS: u32 = 4096;
/// Most PBKDF2 iterations a client accepts from a server (a hostile server could otherwise make
/// every connect burn seconds of CPU).
pub const MAX_ITERATIONS: u32 = 1_000_000;
/// Iterations of a new credential.
pub const DEFAULT_ITERATIONS: u32 = MIN_ITERATIONS;
/// Bytes of a new credential's salt.
pub const SALT_BYTES: usize = 16;
/// Random bytes in each side's nonce (base64-encoded on the wire).
pub const NONCE_BYTES: usize = 24;
/// Longest SCRAM message accepted from the other side.
pub const MAX_MESSAGE_BYTES: usize = 2048;

type HmacSha256 = Hmac<Sha256>;

/// Why an exchange failed. The server's answer to a client never says which check failed beyond
/// "bad message" against "bad credentials", so it cannot be used to learn whether a user exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// A message does not follow RFC 5802's grammar (or uses a feature not offered here, such
    /// as channel binding).
    #[error("malformed SCRAM message: {0}")]
    Malformed(String),
    /// The proof does not match: wrong user name or password.
    #[error("invalid user name or password")]
    InvalidProof,
    /// The server's final message does not prove it knows the credential.
    #[error("the server could not prove it knows the password: it may not be the server you meant to reach")]
    InvalidServerSignature,
    /// The server refused the exchange in its final message (`e=...`).
    #[error("the server refused the authentication: {0}")]
    ServerError(String),
}

/// What the server stores for one user. Never the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The salt the client mixes into the password.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(ClientKey)`: what the client's proof is checked against.
    pub stored_key: [u8; 32],
    /// `HMAC(SaltedPassword, "Server Key")`: proves the server to the client.
    pub server_key: [u8; 32],
}

impl ScramCredential {
    /// The credential of `password` with a fresh random salt.
    pub fn new(password: &str, iterations: u32) -> Self {
        let mut salt = vec![0u8; SALT_BYTES];
        rand::thread_rng().fill_bytes(&mut salt);
        Self::derive(password, &salt, iterations)
    }

    /// The credential of `password` with this salt and iteration count.
    pub fn derive(password: &str, salt: &[u8], iterations: u32) -> Self {
        let salted = salted_password(password, salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        Self {
            salt: salt.to_vec(),
            iterations,
            stored_key: sha256(&client_key),
            server_key: hmac(&salted, b"Server Key"),
        }
    }
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut out);
    out
}

fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn xor(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    std::array::from_fn(|index| a[index] ^ b[index])
}

/// Compares without stopping at the first difference.
fn constant_time_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh printable nonce.
pub fn new_nonce() -> String {
    let mut bytes = [0u8; NONCE_BYTES];
    rand::thread_rng().fill_bytes(&mut bytes);
    BASE64.encode(bytes)
}

/// `saslname` escaping of RFC 5802: `=` as `=3D`, `,` as `=2C`.
fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn unescape_name(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(position) = rest.find('=') {
        out.push_str(&rest[..position]);
        let escape = rest.get(position..position + 3);
        match escape {
            Some("=3D") => out.push('='),
            Some("=2C") => out.push(','),
            _ => return Err(malformed("a user name has an invalid '=' escape")),
        }
        rest = &rest[position + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn malformed(message: &str) -> ScramError {
    ScramError::Malformed(message.to_owned())
}

fn text(message: &[u8]) -> Result<&str, ScramError> {
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(ScramError::Malformed(format!(
            "message of {} bytes exceeds the limit of {MAX_MESSAGE_BYTES}",
            message.len()
        )));
    }
    std::str::from_utf8(message).map_err(|_| malformed("message is not UTF-8"))
}

/// The value of attribute `name` (`name=value`) of `part`.
fn attribute(part: Option<&str>, name: char) -> Result<&str, ScramError> {
    part.and_then(|part| part.strip_prefix(name))
        .and_then(|part| part.strip_prefix('='))
        .ok_or_else(|| ScramError::Malformed(format!("expected attribute '{name}='")))
}

fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|byte| (0x21..=0x7e).contains(&byte) && byte != b',')
}

/// The client's first message, parsed by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The GS2 header (`n,,` or `y,,` or with an authorization id), echoed in `c=`.
    pub gs2_header: String,
    /// The user name, unescaped.
    pub user: String,
    /// The client's nonce.
    pub nonce: String,
    /// The message without the GS2 header (part of the `AuthMessage`).
    pub bare: String,
}

impl ClientFirst {
    /// Parses `gs2-header client-first-message-bare`. Channel binding (`p=`) and mandatory
    /// extensions (`m=`) are refused; an authorization id must equal the user name.
    pub fn parse(message: &[u8]) -> Result<Self, ScramError> {
        let message = text(message)?;
        let mut parts = message.splitn(3, ',');
        let binding = parts.next().unwrap_or_default();
        match binding {
            "n" | "y" => {}
            _ if binding.starts_with("p=") => {
                return Err(malformed(
                    "channel binding is not supported; use SCRAM-SHA-256, not -PLUS",
                ))
            }
            _ => return Err(malformed("the message must start with 'n,' or 'y,'")),
        }
        let authorization = parts.next().ok_or_else(|| malformed("no GS2 header"))?;
        let bare = parts
            .next()
            .ok_or_else(|| malformed("no client-first-message-bare"))?;
        let gs2_header = format!("{binding},{authorization},");
        let mut fields = bare.split(',');
        let first = fields.next();
        if first.is_some_and(|field| field.starts_with("m=")) {
            return Err(malformed("mandatory extensions are not supported"));
        }
        let user = unescape_name(attribute(first, 'n')?)?;
        let nonce = attribute(fields.next(), 'r')?.to_owned();
        if user.is_empty() {
            return Err(malformed("the user name is empty"));
        }
        if !valid_nonce(&nonce) {
            return Err(malformed("the client nonce is empty or not printable"));
        }
        if !authorization.is_empty() {
            let authorization_id = unescape_name(attribute(Some(authorization), 'a')?)?;
            if authorization_id != user {
                return Err(malformed(
                    "an authorization id other than the user name is not supported",
                ));
            }
        }
        Ok(Self {
            gs2_header,
            user,
            nonce,
            bare: bare.to_owned(),
        })
    }
}

/// The server's side of one exchange, between its first and its final message.
#[derive(Debug, Clone)]
pub struct ServerExchange {
    client_first: ClientFirst,
    server_first: String,
    nonce: String,
    credential: ScramCredential,
}

impl ServerExchange {
    /// Answers a client's first message with the server-first message. `credential` is the
    /// user's, or for an unknown user a decoy the server derives itself (same shape, so the
    /// answer does not reveal that the user does not exist; its proof can never match).
    pub fn start(client_first: ClientFirst, credential: ScramCredential) -> (Self, Vec<u8>) {
        Self::start_with_nonce(client_first, credential, &new_nonce())
    }

    fn start_with_nonce(
        client_first: ClientFirst,
        credential: ScramCredential,
        server_nonce: &str,
    ) -> (Self, Vec<u8>) {
        let nonce = format!("{}{server_nonce}", client_first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let message = server_first.clone().into_bytes();
        (
            Self {
                client_first,
                server_first,
                nonce,
                credential,
            },
            message,
        )
    }

    /// Whether the client-final message's nonce is this exchange's: the combined nonce, or
    /// the client nonce followed by the combined nonce, which librdkafka before 2.6.1 (kcat
    /// 1.7.1's librdkafka 2.0) sends and Kafka's broker accepts since 3.8.1
    /// (confluentinc/librdkafka#4895). The proof still covers the message as sent.
    fn accepts_final_nonce(&self, nonce: &str) -> bool {
        nonce == self.nonce
            || nonce
                .strip_prefix(self.client_first.nonce.as_str())
                .is_some_and(|rest| rest == self.nonce)
    }

    /// The user name the client claimed.
    pub fn user(&self) -> &str {
        &self.client_first.user
    }

    /// Checks the client's final message; on success returns the server-final message
    /// (`v=ServerSignature`) and the client is authenticated as [`Self::user`].
    pub fn finish(&self, client_final: &[u8]) -> Result<Vec<u8>, ScramError> {
        let message = text(client_final)?;
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or_else(|| malformed("the final message has no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = attribute(fields.next(), 'c')?;
        let nonce = attribute(fields.next(), 'r')?;
        let binding = BASE64
            .decode(binding)
            .map_err(|_| malformed("channel binding is not base64"))?;
        if binding != self.client_first.gs2_header.as_bytes() {
            return Err(malformed(
                "channel binding does not match the first message",
            ));
        }
        if !self.accepts_final_nonce(nonce) {
            return Err(malformed("the nonce does not match the exchange"));
        }
        let proof: [u8; 32] = BASE64
            .decode(proof)
            .ok()
            .and_then(|proof| proof.try_into().ok())
            .ok_or_else(|| malformed("the proof is not 32 base64-encoded bytes"))?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first.bare, self.server_first
        );
        let client_signature = hmac(&self.credential.stored_key, auth_message.as_bytes());
        let client_key = xor(&proof, &client_signature);
        if !constant_time_equal(&sha256(&client_key), &self.credential.stored_key) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }
}

/// The client's side of one exchange.
#[derive(Debug, Clone)]
pub struct ClientExchange {
    password: String,
    bare: String,
    nonce: String,
    server_signature: Option<[u8; 32]>,
}

/// The GS2 header a client without channel binding sends.
const GS2_HEADER: &str = "n,,";

impl ClientExchange {
    /// Starts an exchange for `user`; returns the state and the client-first message.
    pub fn start(user: &str, password: &str) -> (Self, Vec<u8>) {
        Self::start_with_nonce(user, password, &new_nonce())
    }

    fn start_with_nonce(user: &str, password: &str, nonce: &str) -> (Self, Vec<u8>) {
        let bare = format!("n={},r={nonce}", escape_name(user));
        let message = format!("{GS2_HEADER}{bare}").into_bytes();
        (
            Self {
                password: password.to_owned(),
                bare,
                nonce: nonce.to_owned(),
                server_signature: None,
            },
            message,
        )
    }

    /// Answers the server-first message with the client-final message (the proof).
    pub fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let server_first = text(server_first)?;
        let mut fields = server_first.split(',');
        let first = fields.next();
        if first.is_some_and(|field| field.starts_with("m=")) {
            return Err(malformed("the server asks for a mandatory extension"));
        }
        let nonce = attribute(first, 'r')?;
        let salt = attribute(fields.next(), 's')?;
        let iterations = attribute(fields.next(), 'i')?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() || !valid_nonce(nonce)
        {
            return Err(malformed("the server's nonce does not extend the client's"));
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|_| malformed("the salt is not base64"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| malformed("the iteration count is not a number"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Malformed(format!(
                "the server asks for {iterations} iterations; accepted: {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            )));
        }
        let salted = salted_password(&self.password, &salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key = sha256(&client_key);
        let server_key = hmac(&salted, b"Server Key");
        let without_proof = format!("c={},r={nonce}", BASE64.encode(GS2_HEADER));
        let auth_message = format!("{},{server_first},{without_proof}", self.bare);
        let client_signature = hmac(&stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &client_signature);
        self.server_signature = Some(hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server must prove it knows the credential.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let server_final = text(server_final)?;
        if let Some(error) = server_final.strip_prefix("e=") {
            return Err(ScramError::ServerError(error.to_owned()));
        }
        let signature = attribute(Some(server_final), 'v')?;
        let signature = BASE64
            .decode(signature)
            .map_err(|_| malformed("the server signature is not base64"))?;
        let expected = self
            .server_signature
            .ok_or_else(|| malformed("the server's final message came before its first"))?;
        if !constant_time_equal(&signature, &expected) {
            return Err(ScramError::InvalidServerSignature);
        }
        Ok(())
    }
}

/// A decoy credential for a user that does not exist: deterministic per name (so two probes of
/// one name see the same salt) and per server (`secret`), and no password matches it.
pub fn decoy_credential(secret: &[u8; 32], user: &str) -> ScramCredential {
    let salt = hmac(secret, format!("salt:{user}").as_bytes());
    ScramCredential {
        salt: salt[..SALT_BYTES].to_vec(),
        iterations: DEFAULT_ITERATIONS,
        stored_key: hmac(secret, format!("stored:{user}").as_bytes()),
        server_key: hmac(secret, format!("server:{user}").as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7677, section 3.
    const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_credential() -> ScramCredential {
        ScramCredential::derive("pencil", &BASE64.decode(SALT).unwrap(), 4096)
    }

    /// librdkafka before 2.6.1 repeats the client nonce before the combined nonce in its final
    /// message; that exchange succeeds (the proof covers the message as sent), and any other
    /// nonce is still refused.
    #[test]
    fn server_accepts_librdkafka_2_0_repeated_client_nonce_and_no_other() {
        let first = ClientFirst::parse(CLIENT_FIRST.as_bytes()).unwrap();
        let (server, _) = ServerExchange::start_with_nonce(first, rfc_credential(), SERVER_NONCE);
        let credential = rfc_credential();
        let final_with = |nonce: &str| {
            let salted = salted_password("pencil", &BASE64.decode(SALT).unwrap(), 4096);
            let client_key = hmac(&salted, b"Client Key");
            let without_proof = format!("c=biws,r={nonce}");
            let auth_message = format!("n=user,r={CLIENT_NONCE},{SERVER_FIRST},{without_proof}");
            let signature = hmac(&credential.stored_key, auth_message.as_bytes());
            let proof = xor(&client_key, &signature);
            format!("{without_proof},p={}", BASE64.encode(proof))
        };
        let repeated = format!("{CLIENT_NONCE}{CLIENT_NONCE}{SERVER_NONCE}");
        assert!(server.finish(final_with(&repeated).as_bytes()).is_ok());
        let other = format!("x{CLIENT_NONCE}{SERVER_NONCE}");
        assert!(matches!(
            server.finish(final_with(&other).as_bytes()),
            Err(ScramError::Malformed(_))
        ));
    }

    /// The client side writes exactly the RFC 7677 messages and accepts its server signature.
    #[test]
    fn client_side_matches_the_rfc_7677_vector() {
        let (mut client, first) = ClientExchange::start_with_nonce("user", "pencil", CLIENT_NONCE);
        assert_eq!(first, CLIENT_FIRST.as_bytes());
        let last = client.respond(SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(last).unwrap(), CLIENT_FINAL);
        client.verify(SERVER_FINAL.as_bytes()).unwrap();
        assert_eq!(
            client.verify(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
            Err(ScramError::InvalidServerSignature)
        );
    }

    /// The server side, from the stored credential alone, answers the RFC 7677 messages exactly.
    #[test]
    fn server_side_matches_the_rfc_7677_vector() {
        let first = ClientFirst::parse(CLIENT_FIRST.as_bytes()).unwrap();
        assert_eq!(first.user, "user");
        let (server, server_first) =
            ServerExchange::start_with_nonce(first, rfc_credential(), SERVER_NONCE);
        assert_eq!(server_first, SERVER_FIRST.as_bytes());
        let last = server.finish(CLIENT_FINAL.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(last).unwrap(), SERVER_FINAL);
    }

    /// A wrong password fails with the same error whether or not the user exists.
    #[test]
    fn a_wrong_password_and_an_unknown_user_fail_alike() {
        let exchange = |user: &str, password: &str, credential: ScramCredential| {
            let (mut client, first) = ClientExchange::start(user, password);
            let (server, server_first) =
                ServerExchange::start(ClientFirst::parse(&first).unwrap(), credential);
            let last = client.respond(&server_first).unwrap();
            server.finish(&last).map(|_| ())
        };
        assert_eq!(exchange("user", "pencil", rfc_credential()), Ok(()));
        assert_eq!(
            exchange("user", "crayon", rfc_credential()),
            Err(ScramError::InvalidProof)
        );
        let decoy = decoy_credential(&[7; 32], "nobody");
        assert_eq!(decoy, decoy_credential(&[7; 32], "nobody"));
        assert_eq!(
            exchange("nobody", "pencil", decoy),
            Err(ScramError::InvalidProof)
        );
    }

    /// Names with ',' and '=' are escaped and unescaped; malformed first messages are refused.
    #[test]
    fn client_first_messages_are_parsed_strictly() {
        let parsed = ClientFirst::parse(b"n,,n=a=2Cb=3Dc,r=xyz").unwrap();
        assert_eq!(parsed.user, "a,b=c");
        assert_eq!(
            ClientFirst::parse(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=xyz")
                .unwrap()
                .gs2_header,
            "n,a=a=2Cb=3Dc,"
        );
        // Kafka clients may add extensions after the nonce.
        assert!(ClientFirst::parse(b"n,,n=user,r=abc,tokenauth=true").is_ok());
        for bad in [
            &b"p=tls-unique,,n=user,r=abc"[..],
            b"n,,m=x,n=user,r=abc",
            b"n,,n=,r=abc",
            b"n,,n=user,r=",
            b"n,,n=us=er,r=abc",
            b"n,a=other,n=user,r=abc",
            b"x,,n=user,r=abc",
            b"n,,n=user",
            b"\xff",
        ] {
            assert!(ClientFirst::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// A final message with another nonce or binding is refused before the proof is checked.
    #[test]
    fn final_messages_must_continue_the_exchange() {
        let first = ClientFirst::parse(CLIENT_FIRST.as_bytes()).unwrap();
        let (server, _) = ServerExchange::start_with_nonce(first, rfc_credential(), SERVER_NONCE);
        let other_nonce = CLIENT_FINAL.replace("k0,p=", "k1,p=");
        assert!(matches!(
            server.finish(other_nonce.as_bytes()),
            Err(ScramError::Malformed(_))
        ));
        let other_binding = CLIENT_FINAL.replace("c=biws", "c=eSws");
        assert!(matches!(
            server.finish(other_binding.as_bytes()),
            Err(ScramError::Malformed(_))
        ));
    }
}
