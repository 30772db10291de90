//! `GET /metrics` over HTTP/1: the Prometheus scrape endpoint (`serve --metrics-listen ADDR`).
//!
//! hyper serves the HTTP; this file bounds it like every other listener of the server: at most
//! `max_connections` scrapers at once (more are closed at accept), a request head of at most
//! [`MAX_METRICS_REQUEST_BYTES`], `read_timeout` to send it, `connection_timeout` for the whole
//! exchange, and one request per connection (no keep-alive to hold a slot). Any other path is a
//! 404, any other method a 405. The text is rendered on the blocking pool: with thousands of
//! partitions it takes a moment, and the async workers keep serving clients meanwhile.
//!
//! The endpoint holds the service weakly, so it never keeps a stopped broker (and its data
//! directory lock) alive; once the service is gone it answers 503.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, info, warn};

pub mod api;
pub mod assignment;
pub mod exposition;
pub mod messages;
pub mod session;

pub use exposition::render;

use crate::broker::BrokerService;
use crate::domain::{ConfigError, Quantity};
use exposition::CONTENT_TYPE as EXPOSITION_CONTENT_TYPE;

/// The one path served.
pub const METRICS_PATH: &str = "/metrics";
/// Default most scrapers connected at once.
pub const DEFAULT_METRICS_MAX_CONNECTIONS: usize = 16;
/// Largest request head (request line and headers) accepted, in bytes: hyper's smallest buffer.
pub const MAX_METRICS_REQUEST_BYTES: usize = 8 * 1024;
/// Default longest a scraper may take to send its request head.
pub const DEFAULT_METRICS_READ_TIMEOUT_MS: u64 = 5_000;
/// Default longest one connection may last, answer included.
pub const DEFAULT_METRICS_CONNECTION_TIMEOUT_MS: u64 = 30_000;

/// Limits of the metrics endpoint.
#[derive(Debug, Clone)]
pub struct MetricsEndpointConfig {
    /// Most connections at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// A request head not received within this is answered 408 and the connection closed.
    pub read_timeout: Duration,
    /// A connection still open after this is closed.
    pub connection_timeout: Duration,
    /// Serve the console (its page at `/` and the JSON views under `/api/`) too.
    pub serve_api: bool,
    /// The server's users and ACLs when it runs with `--auth`: the console then asks for a login
    /// (`POST /api/login`, checked against the SCRAM credentials) and each user sees only the
    /// topics its ACLs let it see. `None`: open, as the native listener without `--auth`.
    pub login: Option<Arc<crate::auth::Security>>,
    /// TLS, the same as the server's other listeners (`--tls-cert`, `--tls-key`, and with
    /// `--tls-client-ca` mutual TLS): the handshake must end within `read_timeout`, and the
    /// session cookie is then marked `Secure`. `None`: plain HTTP.
    pub tls: Option<crate::server::ServerTls>,
}

impl Default for MetricsEndpointConfig {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_METRICS_MAX_CONNECTIONS,
            read_timeout: Duration::from_millis(DEFAULT_METRICS_READ_TIMEOUT_MS),
            connection_timeout: Duration::from_millis(DEFAULT_METRICS_CONNECTION_TIMEOUT_MS),
            serve_api: true,
            login: None,
            tls: None,
        }
    }
}

/// Why the metrics endpoint did not start.
#[derive(Debug, Error)]
pub enum MetricsEndpointError {
    /// The address could not be bound (in use, not local, no permission).
    #[error("metrics listener: cannot listen on {addr}: {source}; pick another --metrics-listen address")]
    Bind {
        /// The address asked for.
        addr: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A limit is out of range.
    #[error("metrics listener: {0}")]
    InvalidConfig(#[from] ConfigError),
}

impl MetricsEndpointConfig {
    /// Checks the limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range(
            "max_connections",
            Quantity::count(self.max_connections),
            Quantity::Count(1),
            Quantity::count(Semaphore::MAX_PERMITS),
        )?;
        for (field, value) in [
            ("read_timeout", self.read_timeout),
            ("connection_timeout", self.connection_timeout),
        ] {
            ConfigError::check_positive(field, Quantity::duration(value))?;
        }
        Ok(())
    }
}

/// A running metrics endpoint; dropping it (or [`MetricsEndpoint::stop`]) stops it.
#[derive(Debug)]
pub struct MetricsEndpoint {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl MetricsEndpoint {
    /// Binds `addr` and serves the metrics of `service` there.
    pub async fn bind(
        addr: &str,
        service: &Arc<BrokerService>,
        config: MetricsEndpointConfig,
    ) -> Result<Self, MetricsEndpointError> {
        let listener =
            TcpListener::bind(addr)
                .await
                .map_err(|source| MetricsEndpointError::Bind {
                    addr: addr.to_string(),
                    source,
                })?;
        Self::start(listener, service, config)
    }

    /// Serves the metrics of `service` on an already bound `listener`.
    pub fn start(
        listener: TcpListener,
        service: &Arc<BrokerService>,
        config: MetricsEndpointConfig,
    ) -> Result<Self, MetricsEndpointError> {
        config.validate()?;
        let addr = listener
            .local_addr()
            .map_err(|source| MetricsEndpointError::Bind {
                addr: "the given listener".into(),
                source,
            })?;
        info!(%addr, path = METRICS_PATH, "metrics listening");
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept_loop(
            listener,
            Arc::downgrade(service),
            config,
            stopped,
        ));
        Ok(Self {
            addr,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address scrapers connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, and waits for the scrapes in progress to end.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            if let Err(error) = task.await {
                warn!(%error, "metrics endpoint failed");
            }
        }
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    service: Weak<BrokerService>,
    config: MetricsEndpointConfig,
    mut stopped: oneshot::Receiver<()>,
) {
    let connections = Arc::new(Semaphore::new(config.max_connections));
    let sessions = Arc::new(session::Sessions::default());
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(error) => {
                        warn!(%error, "metrics accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
                    warn!(%peer, max_connections = config.max_connections, "metrics connection limit reached; closing");
                    continue;
                };
                let service = service.clone();
                let config = config.clone();
                let sessions = Arc::clone(&sessions);
                tasks.spawn(async move {
                    serve_connection(socket, peer, service, &config, &sessions).await;
                    drop(permit);
                });
                while tasks.try_join_next().is_some() {}
            }
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

async fn serve_connection(
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
    service: Weak<BrokerService>,
    config: &MetricsEndpointConfig,
    sessions: &Arc<session::Sessions>,
) {
    let console = Console {
        serve_api: config.serve_api,
        login: config.login.clone(),
        sessions: Arc::clone(sessions),
        secure_cookie: config.tls.is_some(),
    };
    let exchange = async {
        match &config.tls {
            None => serve_http(socket, service, config, console).await,
            Some(tls) => {
                // The handshake counts against the connection's whole time, and must end
                // within the time a request head is given.
                let Some(stream) = tls.accept(socket, peer, config.read_timeout).await else {
                    return Ok(());
                };
                serve_http(stream, service, config, console).await
            }
        }
    };
    match tokio::time::timeout(config.connection_timeout, exchange).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => debug!(%peer, %error, "metrics connection ended with an error"),
        Err(_) => debug!(%peer, "metrics connection timed out; closed"),
    }
}

/// One HTTP/1 exchange over `stream` (plain TCP or TLS), bounded as the module says.
async fn serve_http<S>(
    stream: S,
    service: Weak<BrokerService>,
    config: &MetricsEndpointConfig,
    console: Console,
) -> Result<(), hyper::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(config.read_timeout)
        .max_buf_size(MAX_METRICS_REQUEST_BYTES)
        .keep_alive(false)
        .serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(move |request| {
                answer(request, service.clone(), console.clone())
            }),
        )
        .await
}

/// What a connection's requests need of the console: whether it is served, the login it asks
/// for under `--auth`, and the sessions of those who logged in.
#[derive(Clone)]
struct Console {
    serve_api: bool,
    login: Option<Arc<crate::auth::Security>>,
    sessions: Arc<session::Sessions>,
    /// Mark the session cookie `Secure` (the listener serves TLS): a browser then never sends
    /// it over plain HTTP.
    secure_cookie: bool,
}

/// The path of the console's login (a form: `user`, `password`).
pub const LOGIN_PATH: &str = "/api/login";
/// The path that ends a console session.
pub const LOGOUT_PATH: &str = "/api/logout";
/// Largest login form accepted, in bytes.
const MAX_LOGIN_FORM_BYTES: usize = 4 * 1024;

impl Console {
    /// What `request` may see: everything without `--auth`; with it, what the logged-in user's
    /// ACLs allow, or the `401` that asks for a login.
    fn access(
        &self,
        request: &Request<Incoming>,
    ) -> Result<crate::auth::Access, Box<Response<Full<Bytes>>>> {
        let Some(security) = &self.login else {
            return Ok(crate::auth::Access::open());
        };
        let cookie = request
            .headers()
            .get(hyper::header::COOKIE)
            .and_then(|value| value.to_str().ok());
        match self.sessions.user(cookie) {
            Some(user) => Ok(crate::auth::Access::as_principal(Arc::clone(security), user)),
            None => Err(Box::new(text_response(
                StatusCode::UNAUTHORIZED,
                format!("log in first: POST {LOGIN_PATH} with the form fields user and password (the server runs with --auth)"),
            ))),
        }
    }

    /// `POST /api/login`: the form's user and password against the SCRAM credentials; on
    /// success a session cookie.
    async fn login(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let Some(security) = &self.login else {
            return text_response(
                StatusCode::NOT_FOUND,
                "this server runs without --auth: the console needs no login".to_string(),
            );
        };
        if request.method() != Method::POST {
            return plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "send the login form with POST\n",
            );
        }
        use http_body_util::BodyExt;
        let body = match http_body_util::Limited::new(request.into_body(), MAX_LOGIN_FORM_BYTES)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                return text_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("a login form is at most {MAX_LOGIN_FORM_BYTES} bytes"),
                )
            }
        };
        let Some((user, password)) = session::login_form(&body) else {
            return text_response(
                StatusCode::BAD_REQUEST,
                "send the form fields user and password".to_string(),
            );
        };
        let security = Arc::clone(security);
        let checked_user = user.clone();
        let valid =
            tokio::task::spawn_blocking(move || security.check_password(&checked_user, &password))
                .await
                .unwrap_or(false);
        if !valid {
            return text_response(
                StatusCode::UNAUTHORIZED,
                "wrong user name or password".to_string(),
            );
        }
        let Some(token) = self.sessions.open(&user) else {
            return text_response(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{} console sessions are open (MAX_CONSOLE_SESSIONS); try again when one expires",
                    session::MAX_CONSOLE_SESSIONS
                ),
            );
        };
        let mut response = text_response(StatusCode::OK, format!("logged in as {user}"));
        let cookie = format!(
            "{}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
            session::SESSION_COOKIE,
            session::CONSOLE_SESSION_TTL.as_secs(),
            if self.secure_cookie { "; Secure" } else { "" }
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response
                .headers_mut()
                .insert(hyper::header::SET_COOKIE, value);
        }
        response
    }
}

async fn answer(
    request: Request<Incoming>,
    service: Weak<BrokerService>,
    console: Console,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let serve_api = console.serve_api;
    let path = request.uri().path();
    if serve_api && path == LOGIN_PATH {
        return Ok(console.login(request).await);
    }
    if serve_api && path == LOGOUT_PATH {
        let cookie = request
            .headers()
            .get(hyper::header::COOKIE)
            .and_then(|value| value.to_str().ok());
        console.sessions.close(cookie);
        return Ok(text_response(StatusCode::OK, "logged out".to_string()));
    }
    let access = if serve_api && path.starts_with("/api/") {
        match console.access(&request) {
            Ok(access) => access,
            Err(refusal) => return Ok(*refusal),
        }
    } else {
        crate::auth::Access::open()
    };
    if serve_api && request.uri().path() == api::CONSOLE_PATH {
        // Under --auth the page shows its "log out" button (it cannot see the HttpOnly cookie).
        let page = match console.login {
            Some(_) => Bytes::from(api::CONSOLE_HTML.replacen(
                "<body>",
                "<body data-login=\"required\">",
                1,
            )),
            None => Bytes::from_static(api::CONSOLE_HTML.as_bytes()),
        };
        let mut response = Response::new(Full::new(page));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        return Ok(response);
    }
    if serve_api && request.uri().path() == api::PARTITIONS_PATH {
        return Ok(answer_view(&request, service, access, api::render_partitions).await);
    }
    if serve_api && request.uri().path() == api::LEASES_PATH {
        return Ok(answer_view(&request, service, access, api::render_leases).await);
    }
    if serve_api && request.uri().path() == api::TOPICS_PATH {
        return Ok(answer_view(&request, service, access, api::render_topics).await);
    }
    if serve_api && request.uri().path() == api::CLUSTER_PATH {
        return Ok(answer_view(&request, service, access, api::render_cluster).await);
    }
    if serve_api && request.uri().path() == api::GROUPS_PATH {
        return Ok(answer_groups(&request, service, access).await);
    }
    if serve_api && request.uri().path() == messages::MESSAGES_PATH {
        return Ok(answer_messages(&request, service, access).await);
    }
    if request.uri().path() != METRICS_PATH {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "not found; metrics are at /metrics\n",
        ));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Ok(plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is served at /metrics\n",
        ));
    }
    let rendered =
        tokio::task::spawn_blocking(move || service.upgrade().map(|service| render(&service)))
            .await;
    Ok(match rendered {
        Ok(Some(text)) => {
            let mut response = Response::new(Full::new(Bytes::from(text)));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(EXPOSITION_CONTENT_TYPE),
            );
            response
        }
        Ok(None) => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down\n",
        ),
        Err(error) => {
            warn!(%error, "rendering metrics failed");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "rendering metrics failed\n",
            )
        }
    })
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The groups view: rendered on the async workers, since a group's committed offsets are read
/// through the service (on a cluster, from its coordinator's loaded state).
async fn answer_groups(
    request: &Request<Incoming>,
    service: Weak<BrokerService>,
    access: crate::auth::Access,
) -> Response<Full<Bytes>> {
    let page = match read_only_page(request) {
        Ok(page) => page,
        Err(refusal) => return *refusal,
    };
    match service.upgrade() {
        Some(service) => json_response(
            api::render_groups(&service, &page, &access)
                .await
                .to_string(),
        ),
        None => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down\n",
        ),
    }
}

/// The message browser: read off the async workers (it reads the log).
async fn answer_messages(
    request: &Request<Incoming>,
    service: Weak<BrokerService>,
    access: crate::auth::Access,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is served under /api/ (the console is read-only)\n",
        );
    }
    let query = match messages::parse_query(request.uri().query()) {
        Ok(query) => query,
        Err(reason) => return text_response(StatusCode::BAD_REQUEST, reason),
    };
    // Reading records is consuming them.
    if let Err(refused) = access.check(crate::auth::Operation::Consume, &query.topic) {
        return text_response(StatusCode::FORBIDDEN, refused.to_string());
    }
    let rendered = tokio::task::spawn_blocking(move || {
        service
            .upgrade()
            .map(|service| messages::render_messages(&service, &query))
    })
    .await;
    match rendered {
        Ok(Some(Ok(page))) => json_response(page.to_string()),
        Ok(Some(Err(messages::MessagesError::NotFound(reason)))) => {
            text_response(StatusCode::NOT_FOUND, reason)
        }
        Ok(Some(Err(messages::MessagesError::Refused(reason)))) => {
            text_response(StatusCode::BAD_REQUEST, reason)
        }
        Ok(None) => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down\n",
        ),
        Err(error) => {
            warn!(%error, "reading messages for the console failed");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reading the messages failed\n",
            )
        }
    }
}

/// A plain-text answer with `status` and `reason` on one line.
fn text_response(status: StatusCode, reason: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{reason}\n"))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The page a GET under `/api/` asks for, or the answer refusing it (another method: 405; a
/// bad query: 400 with what to send instead).
fn read_only_page(
    request: &Request<Incoming>,
) -> Result<api::PageQuery, Box<Response<Full<Bytes>>>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Err(Box::new(plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is served under /api/ (the console is read-only)\n",
        )));
    }
    api::parse_query(request.uri().query())
        .map_err(|reason| Box::new(text_response(StatusCode::BAD_REQUEST, reason)))
}

fn json_response(text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A paged JSON view under `/api/`, rendered by `render` off the async workers.
async fn answer_view(
    request: &Request<Incoming>,
    service: Weak<BrokerService>,
    access: crate::auth::Access,
    render: fn(&BrokerService, &api::PageQuery, &crate::auth::Access) -> serde_json::Value,
) -> Response<Full<Bytes>> {
    let page = match read_only_page(request) {
        Ok(page) => page,
        Err(refusal) => return *refusal,
    };
    let rendered = tokio::task::spawn_blocking(move || {
        service
            .upgrade()
            .map(|service| render(&service, &page, &access).to_string())
    })
    .await;
    match rendered {
        Ok(Some(text)) => json_response(text),
        Ok(None) => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down\n",
        ),
        Err(error) => {
            warn!(%error, "rendering a console view failed");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "rendering the view failed\n",
            )
        }
    }
}
