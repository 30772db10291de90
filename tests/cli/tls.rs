//! TLS on the listeners and in the client, with certificates made in the test (rcgen): a CA, a
//! server certificate for `localhost` and 127.0.0.1, a client certificate. The native client
//! over TLS (reconnects and address lists included), a plain client against a TLS listener, a
//! client that trusts the wrong CA, mutual TLS, the connection limit and the handshake timeout
//! over TLS, the Kafka listener over TLS with kcat, and the CLI with `--tls-ca`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fencelog::batch::{now_ms, BatchBuilder};
use fencelog::client::{Client, ClientError, TlsClientConfig};
use fencelog::domain::TopicConfig;
use fencelog::protocol::ErrorCode;
use fencelog::server::{KafkaConfig, ServerConfig, ServerTls};
use fencelog::testing::TestServer;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tokio::io::AsyncReadExt;

use crate::support::BIN;

/// The files of one test's certificates, in a temporary directory.
struct Pki {
    directory: tempfile::TempDir,
}

/// A CA: its parameters and key sign other certificates (also the cluster TLS test's).
pub(crate) struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pub(crate) pem: String,
}

pub(crate) fn authority(name: &str) -> Authority {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let certificate = params.self_signed(&key).unwrap();
    Authority {
        issuer: Issuer::new(params, key),
        pem: certificate.pem(),
    }
}

/// A certificate for `names` signed by `authority`: (certificate PEM, key PEM).
pub(crate) fn leaf(authority: &Authority, names: &[&str]) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "fencelog test");
    let certificate = params.signed_by(&key, &authority.issuer).unwrap();
    (certificate.pem(), key.serialize_pem())
}

impl Pki {
    /// `ca.pem` signs `server.pem` (localhost, 127.0.0.1) and `client.pem`; `other-ca.pem` signs
    /// `other-client.pem`.
    fn new() -> Pki {
        let directory = tempfile::tempdir().unwrap();
        let write =
            |name: &str, text: &str| std::fs::write(directory.path().join(name), text).unwrap();
        let ca = authority("fencelog test CA");
        let other = authority("someone else's CA");
        write("ca.pem", &ca.pem);
        write("other-ca.pem", &other.pem);
        let (certificate, key) = leaf(&ca, &["localhost", "127.0.0.1"]);
        write("server.pem", &certificate);
        write("server.key", &key);
        let (certificate, key) = leaf(&ca, &["client-1"]);
        write("client.pem", &certificate);
        write("client.key", &key);
        let (certificate, key) = leaf(&other, &["intruder"]);
        write("other-client.pem", &certificate);
        write("other-client.key", &key);
        Pki { directory }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.directory.path().join(name)
    }

    fn server_tls(&self) -> ServerTls {
        ServerTls::from_pem_files(&self.path("server.pem"), &self.path("server.key"), None).unwrap()
    }

    fn mutual_server_tls(&self) -> ServerTls {
        ServerTls::from_pem_files(
            &self.path("server.pem"),
            &self.path("server.key"),
            Some(&self.path("ca.pem")),
        )
        .unwrap()
    }

    fn client_tls(&self) -> TlsClientConfig {
        TlsClientConfig::ca_file(self.path("ca.pem")).unwrap()
    }
}

/// A server whose listeners serve TLS with `pki`'s server certificate.
async fn tls_server(pki: &Pki) -> TestServer {
    TestServer::builder()
        .tls(pki.server_tls())
        .start()
        .await
        .unwrap()
}

fn localhost(server: &TestServer) -> String {
    format!("localhost:{}", server.addr().port())
}

async fn tls_client(server: &TestServer, tls: TlsClientConfig) -> Result<Client, ClientError> {
    Client::builder()
        .addr(localhost(server))
        .tls(tls)
        .connect_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(10))
        .reconnect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// Creates `topic`, appends one record under a lease and reads it back.
async fn produce_and_fetch(client: &Client, topic: &str, value: &str) {
    client
        .create_topic(topic, 1, TopicConfig::default())
        .await
        .unwrap();
    let lease = client
        .acquire_lease(topic, 0, "writer", Duration::from_secs(30))
        .await
        .unwrap();
    let mut batch = BatchBuilder::new(lease.epoch);
    batch.push(now_ms(), None, Some(value.as_bytes()));
    let ack = client.produce(topic, 0, batch.finish()).await.unwrap();
    assert_eq!(ack.base_offset, 0);
    let fetched = client
        .fetch(topic, 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(fetched.records.len(), 1);
    assert_eq!(fetched.records[0].value.as_deref(), Some(value.as_bytes()));
}

/// A client that trusts the CA produces and fetches over TLS, checked against the name it
/// dialled; it reconnects over TLS after a restart; an address list skips a dead address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_client_over_tls_produces_fetches_and_reconnects() {
    let pki = Pki::new();
    let server = tls_server(&pki).await;
    let client = tls_client(&server, pki.client_tls()).await.unwrap();
    produce_and_fetch(&client, "orders", "over tls").await;

    let server = server.restart().await.unwrap();
    let offsets = client.list_offsets("orders", 0).await.unwrap();
    assert_eq!(offsets.latest, 1, "reconnected over TLS after the restart");

    // By IP address (the certificate holds 127.0.0.1 too), after a dead address.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let listed = Client::builder()
        .addr_list(&format!("{dead_addr},{}", server.addr()))
        .tls(pki.client_tls())
        .connect()
        .await
        .unwrap();
    assert_eq!(listed.list_offsets("orders", 0).await.unwrap().latest, 1);
}

/// A plain-TCP client against a TLS listener fails with an error that says the server speaks
/// TLS, and the server goes on serving TLS clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_client_against_a_tls_listener_fails_cleanly_and_the_server_keeps_serving() {
    let pki = Pki::new();
    let server = tls_server(&pki).await;
    let plain = Client::builder()
        .addr(server.addr().to_string())
        .reconnect_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let error = plain
        .create_topic("plain", 1, TopicConfig::default())
        .await
        .expect_err("a plain client cannot talk to a TLS listener");
    let message = error.to_string();
    assert!(
        matches!(error, ClientError::Tls { .. }) && message.contains("speaks TLS"),
        "{message}"
    );
    let client = tls_client(&server, pki.client_tls()).await.unwrap();
    produce_and_fetch(&client, "after-plain", "still serving").await;
}

/// A client that trusts another CA, or checks another name, fails with an error naming the
/// certificate problem; a TLS client against a plain listener is told the server does not
/// speak TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_problems_are_named_in_the_error() {
    let pki = Pki::new();
    let server = tls_server(&pki).await;
    let wrong_ca = TlsClientConfig::ca_file(pki.path("other-ca.pem")).unwrap();
    let error = tls_client(&server, wrong_ca)
        .await
        .expect_err("the server's CA is not trusted");
    let message = error.to_string();
    assert!(
        matches!(error, ClientError::Tls { .. })
            && message.contains("not signed by a CA this client trusts"),
        "{message}"
    );
    assert!(
        !error.is_retriable(),
        "a certificate problem is not retriable"
    );

    let error = Client::builder()
        .addr(localhost(&server))
        .tls(pki.client_tls())
        .tls_server_name("broker.example")
        .connect()
        .await
        .expect_err("the certificate does not hold that name");
    assert!(
        error.to_string().contains("not valid for the name"),
        "{error}"
    );

    let plain_server = TestServer::start().await.unwrap();
    let error = tls_client(&plain_server, pki.client_tls())
        .await
        .expect_err("the server does not speak TLS");
    assert!(error.to_string().contains("does not speak TLS"), "{error}");
}

/// Under mutual TLS a client without a certificate, or with one from another CA, is refused
/// and can do nothing; a client with a certificate from the client CA is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_a_client_without_a_certificate() {
    let pki = Pki::new();
    let server = TestServer::builder()
        .tls(pki.mutual_server_tls())
        .start()
        .await
        .unwrap();
    assert!(pki.mutual_server_tls().client_certificates_required());

    // TLS 1.3 completes the client's side of the handshake before the server checks the
    // client's certificate, so the refusal arrives with the first request.
    let refused = match tls_client(&server, pki.client_tls()).await {
        Ok(client) => client
            .create_topic("anonymous", 1, TopicConfig::default())
            .await
            .expect_err("no client certificate"),
        Err(error) => error,
    };
    assert!(
        refused
            .to_string()
            .contains("requires a client certificate"),
        "{refused}"
    );

    let intruder = pki
        .client_tls()
        .with_client_certificate(pki.path("other-client.pem"), pki.path("other-client.key"))
        .unwrap();
    let refused = match tls_client(&server, intruder).await {
        Ok(client) => client
            .create_topic("intruder", 1, TopicConfig::default())
            .await
            .expect_err("a certificate from another CA"),
        Err(error) => error,
    };
    assert!(matches!(refused, ClientError::Tls { .. }), "{refused:?}");
    assert!(server.broker().topics().is_empty(), "nothing was created");

    let member = pki
        .client_tls()
        .with_client_certificate(pki.path("client.pem"), pki.path("client.key"))
        .unwrap();
    assert!(member.has_client_certificate());
    let client = tls_client(&server, member).await.unwrap();
    produce_and_fetch(&client, "members", "mutual").await;
}

/// Beyond the connection limit a TLS client still reads `TOO_MANY_CONNECTIONS`, inside TLS; a
/// connection that never starts its handshake is closed after the handshake timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_limit_and_the_handshake_timeout_hold_over_tls() {
    let pki = Pki::new();
    let config = ServerConfig {
        max_connections: 1,
        tls: Some(
            pki.server_tls()
                .with_handshake_timeout(Duration::from_millis(300)),
        ),
        ..ServerConfig::default()
    };
    let server = TestServer::builder()
        .server_config(config)
        .start()
        .await
        .unwrap();
    let first = tls_client(&server, pki.client_tls()).await.unwrap();
    first
        .create_topic("limit", 1, TopicConfig::default())
        .await
        .unwrap();
    // A backoff longer than the request timeout: the refusal is answered as it is, not retried
    // until the request's 30 s run out (which made the answer a timeout on a slow machine).
    let second = Client::builder()
        .addr(localhost(&server))
        .tls(pki.client_tls())
        .reconnect_timeout(Duration::from_millis(100))
        .reconnect_backoff(Duration::from_secs(60), Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    let refused = second
        .list_offsets("limit", 0)
        .await
        .expect_err("one connection at most");
    assert_eq!(
        refused.code(),
        Some(ErrorCode::TooManyConnections),
        "{refused}"
    );
    drop(first);
    drop(second);

    // A silent socket holds its slot only until the handshake timeout.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut silent = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let mut buffer = [0_u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buffer))
        .await
        .expect("closed within the handshake timeout");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    let client = tls_client(&server, pki.client_tls()).await.unwrap();
    assert_eq!(client.list_offsets("limit", 0).await.unwrap().latest, 0);
}

/// kcat (librdkafka) lists, produces and consumes through the Kafka listener over TLS,
/// trusting the test CA. Skipped, with a note, where kcat is not installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_speaks_to_the_kafka_listener_over_tls() {
    if Command::new("kcat").arg("-V").output().is_err() {
        eprintln!("kcat not found: skipping the Kafka-over-TLS check (apt-get install kcat)");
        return;
    }
    let pki = Pki::new();
    let config = ServerConfig {
        tls: Some(pki.server_tls()),
        ..ServerConfig::default()
    };
    let kafka = KafkaConfig::advertising(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(config)
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    let client = tls_client(&server, pki.client_tls()).await.unwrap();
    client
        .create_topic("secure", 1, TopicConfig::default())
        .await
        .unwrap();
    let ca = pki.path("ca.pem").display().to_string();
    let broker = server.kafka_addr().to_string();
    let kcat = move |extra: &[&str], stdin: &str| -> Output {
        let mut command = Command::new("kcat");
        command
            .args(["-b", &broker, "-X", "security.protocol=ssl"])
            .args(["-X", &format!("ssl.ca.location={ca}")])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let run = move |extra: Vec<&'static str>, stdin: &'static str| {
        let kcat = kcat.clone();
        tokio::task::spawn_blocking(move || kcat(&extra, stdin))
    };
    let listed = run(vec!["-L", "-m", "10"], "").await.unwrap();
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && stdout.contains("topic \"secure\""),
        "kcat -L over TLS: {stdout} {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let produced = run(vec!["-P", "-t", "secure", "-p", "0"], "sealed\n")
        .await
        .unwrap();
    assert!(
        produced.status.success(),
        "kcat -P over TLS: {}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let consumed = run(
        vec!["-C", "-t", "secure", "-p", "0", "-e", "-f", "%s\\n"],
        "",
    )
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&consumed.stdout), "sealed\n");

    // Without TLS settings kcat gets nothing from the listener.
    let broker = server.kafka_addr().to_string();
    let plain = tokio::task::spawn_blocking(move || {
        Command::new("kcat")
            .args(["-L", "-b", &broker, "-m", "3"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        !plain.status.success(),
        "a plain Kafka client is not served"
    );
}

/// Runs the binary with `args` and `stdin`, without any TLS or address variables of the
/// environment the tests run in.
fn cli(args: &[&str], stdin: &str, env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("FENCELOG_ADDR")
        .env_remove("RUST_LOG");
    for variable in [
        "FENCELOG_TLS_CA",
        "FENCELOG_TLS_CERT",
        "FENCELOG_TLS_KEY",
        "FENCELOG_TLS_CLIENT_CA",
        "FENCELOG_TLS_CLIENT_CERT",
        "FENCELOG_TLS_CLIENT_KEY",
    ] {
        command.env_remove(variable);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "command failed: {} {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The CLI produces and consumes over TLS with `--tls-ca` (and with `FENCELOG_TLS_CA`), under
/// mutual TLS with `--tls-cert`/`--tls-key`; without TLS flags it exits 1 saying the server
/// speaks TLS.
#[test]
fn cli_produces_and_consumes_with_tls_ca() {
    let pki = Pki::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(TestServer::builder().tls(pki.mutual_server_tls()).start())
        .unwrap();
    let addr = localhost(&server);
    let ca = pki.path("ca.pem");
    let (certificate, key) = (pki.path("client.pem"), pki.path("client.key"));
    let ca_text = ca.to_str().unwrap();
    let tls_flags = [
        "--addr",
        addr.as_str(),
        "--tls-ca",
        ca_text,
        "--tls-cert",
        certificate.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(tls_flags.iter())
            .map(|arg| arg.to_string())
            .collect()
    };
    let run = |args: Vec<String>, stdin: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args, stdin, &[])
    };
    succeeded(&run(
        with(&["topic", "create", "secure", "--partitions", "1"]),
        "",
    ));
    let lease = succeeded(&run(
        with(&[
            "lease", "acquire", "secure", "0", "--holder", "cli", "--json",
        ]),
        "",
    ));
    let lease: serde_json::Value = serde_json::from_str(lease.trim()).unwrap();
    let epoch = lease["epoch"].to_string();
    let produced = succeeded(&run(
        with(&["produce", "secure", "--partition", "0", "--epoch", &epoch]),
        "one\ntwo\n",
    ));
    assert_eq!(produced, "offset 0\noffset 1\n");
    let consumed = succeeded(&run(with(&["consume", "secure", "--partition", "0"]), ""));
    assert_eq!(consumed, "one\ntwo\n");

    // The same from the environment.
    let consumed = cli(
        &["consume", "secure", "--partition", "0", "--addr", &addr],
        "",
        &[
            ("FENCELOG_TLS_CA", &ca),
            ("FENCELOG_TLS_CLIENT_CERT", &certificate),
            ("FENCELOG_TLS_CLIENT_KEY", &key),
        ],
    );
    assert_eq!(succeeded(&consumed), "one\ntwo\n");

    // Without a client certificate, and without TLS at all: exit status 1 and why.
    let anonymous = cli(
        &[
            "consume",
            "secure",
            "--partition",
            "0",
            "--addr",
            &addr,
            "--tls-ca",
            ca_text,
        ],
        "",
        &[],
    );
    assert_eq!(anonymous.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&anonymous.stderr);
    assert!(stderr.contains("requires a client certificate"), "{stderr}");
    let plain = cli(&["topic", "list", "--addr", &addr], "", &[]);
    assert_eq!(plain.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(stderr.contains("speaks TLS"), "{stderr}");
    drop(server);
}

/// `serve` with a certificate file that is missing or is not a certificate exits 1 with a
/// message naming the file and what is wrong, before listening.
#[test]
fn serve_refuses_to_start_with_unusable_certificate_files() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let serve = |certificate: &Path, key: &Path| {
        cli(
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                data.path().to_str().unwrap(),
                "--tls-cert",
                certificate.to_str().unwrap(),
                "--tls-key",
                key.to_str().unwrap(),
            ],
            "",
            &[],
        )
    };
    let missing = pki.path("missing.pem");
    let output = serve(&missing, &pki.path("server.key"));
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(missing.to_str().unwrap()) && stderr.contains("cannot read certificate"),
        "{stderr}"
    );

    // The key given as the certificate.
    let output = serve(&pki.path("server.key"), &pki.path("server.key"));
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("server.key") && stderr.contains("no CERTIFICATE PEM section"),
        "{stderr}"
    );

    // A key that belongs to another certificate.
    let output = serve(&pki.path("server.pem"), &pki.path("client.key"));
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("does not fit the certificate"), "{stderr}");
}

/// The console's HTTP listener serves TLS with the server's certificate: the page, `/metrics`
/// and a JSON view over TLS; a plain-HTTP request gets no answer, and the listener goes on
/// serving TLS clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_listener_serves_tls_like_the_others() {
    use crate::support::http::http_get_over;

    let pki = Pki::new();
    let server = tls_server(&pki).await;
    let http = server.serve_metrics().await.unwrap();
    let roots = fencelog::tls::load_ca_roots(&pki.path("ca.pem")).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(fencelog::tls::crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let host = format!("localhost:{}", http.addr().port());
    let get = |path: &'static str| {
        let connector = connector.clone();
        let host = host.clone();
        async move {
            let socket = tokio::net::TcpStream::connect(&host).await.unwrap();
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let stream = connector
                .connect(name, socket)
                .await
                .expect("TLS handshake");
            http_get_over(stream, &host, path).await.unwrap()
        }
    };
    for path in ["/", "/metrics", "/api/partitions"] {
        let (status, body) = get(path).await;
        assert_eq!(status, 200, "{path} over TLS: {body}");
    }

    let plain = tokio::net::TcpStream::connect(http.addr()).await.unwrap();
    let answer = http_get_over(plain, &host, "/metrics").await;
    assert!(answer.is_err(), "plain HTTP against TLS: {answer:?}");
    let (status, _) = get("/metrics").await;
    assert_eq!(status, 200, "still serving TLS after a plain request");
}
