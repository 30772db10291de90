//! Just enough of the W3C WebDriver protocol to drive headless Chromium through `chromedriver`
//! (Debian's `chromium-driver`): open a page, type into a form, click, read the DOM, take a
//! screenshot. The console's login under `--auth` needs a browser that runs the page's script
//! and keeps its cookie between pages, which Chromium's one-shot `--dump-dom` does not.
//!
//! Blocking HTTP/1.1 over `std::net`, one request per connection: no client crate for a test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// WebDriver's key for an element reference in its JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A running `chromedriver` and one headless Chromium session on it; both end on drop.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

/// `chromedriver` on `PATH`, if installed.
pub fn chromedriver() -> Option<&'static str> {
    ["chromedriver"].into_iter().find(|name| {
        Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success())
    })
}

impl Browser {
    /// Starts `chromedriver` on `port` and a headless Chromium session of 1280x720.
    pub fn start(driver: &str, port: u16) -> Browser {
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut browser = Browser {
            driver: child,
            addr,
            session: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while request(addr, "GET", "/status", None)
            .ok()
            .and_then(|status| status["value"]["ready"].as_bool())
            != Some(true)
        {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,720"]
        }}}});
        let session = request(addr, "POST", "/session", Some(capabilities)).expect("a session");
        browser.session = session["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {session}"))
            .to_owned();
        browser
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let answer = request(self.addr, method, &path, body)
            .unwrap_or_else(|error| panic!("webdriver {method} {path}: {error}"));
        if answer["value"]["error"].is_string() {
            panic!("webdriver {method} {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    /// Opens `url` and waits for the page to load.
    pub fn open(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})));
    }

    /// The document as it stands (after its scripts ran).
    pub fn source(&self) -> String {
        self.call("GET", "/source", None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits up to 10 s for the document to contain `text`; the document then.
    pub fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let source = self.source();
            if source.contains(text) {
                return source;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {text:?}: {source}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn element(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        found[ELEMENT_KEY]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// Replaces what the element `css` selects holds with `text`, typed.
    pub fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css);
        self.call(
            "POST",
            &format!("/element/{element}/clear"),
            Some(json!({})),
        );
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({"text": text})),
        );
    }

    /// Clicks the element `css` selects.
    pub fn click(&self, css: &str) {
        let element = self.element(css);
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
    }

    /// Writes a PNG of the window to `path`.
    pub fn screenshot(&self, path: &Path) {
        let encoded = self.call("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("a base64 screenshot");
        std::fs::write(path, png).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = request(self.addr, "DELETE", &path, None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// One WebDriver request: its JSON answer (errors included), or why there was none.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let mut socket = TcpStream::connect(addr).map_err(|error| error.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|error| error.to_string())?;
    let body = body.map(|body| body.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    socket
        .write_all(head.as_bytes())
        .and_then(|()| socket.write_all(body.as_bytes()))
        .map_err(|error| error.to_string())?;
    // chromedriver keeps the connection open whatever the request says: read the head, then
    // as many bytes as its Content-Length.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    let (head_end, length) = loop {
        let read = socket.read(&mut chunk).map_err(|error| error.to_string())?;
        if read == 0 {
            return Err(format!("closed before a whole head: {answer:?}"));
        }
        answer.extend_from_slice(&chunk[..read]);
        if let Some(at) = answer.windows(4).position(|window| window == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..at]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .ok_or_else(|| format!("no Content-Length in {head:?}"))?;
            break (at + 4, length);
        }
    };
    while answer.len() < head_end + length {
        let read = socket.read(&mut chunk).map_err(|error| error.to_string())?;
        if read == 0 {
            return Err("closed before the whole body".to_string());
        }
        answer.extend_from_slice(&chunk[..read]);
    }
    let body = &answer[head_end..head_end + length];
    serde_json::from_slice(body)
        .map_err(|error| format!("{error}: {}", String::from_utf8_lossy(body)))
}
