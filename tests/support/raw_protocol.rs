//! A raw-protocol client for the reliability tests: `fencelog::protocol` frames over a TCP
//! socket, one request at a time, every call bounded by a timeout so a broken server fails the
//! test instead of hanging it. (The client library is deliberately not used: these tests speak
//! the wire contract itself.)

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use fencelog::batch::{decode_batches, BatchBuilder, Record};
use fencelog::protocol::{
    ErrorCode, ErrorResponse, FlushPolicy, FrameCodec, Request, RequestFrame, Response,
    ResponseFrame, TopicConfig,
};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// Longest any single call may take before the test fails.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection speaking raw frames.
pub struct RawClient {
    pub framed: Framed<TcpStream, FrameCodec>,
    next_id: u32,
}

impl RawClient {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> Self {
        let socket = tokio::time::timeout(CALL_TIMEOUT, TcpStream::connect(addr))
            .await
            .expect("connect timed out")
            .expect("connect");
        Self {
            framed: Framed::new(socket, FrameCodec::default()),
            next_id: 1,
        }
    }

    /// Sends one request and waits for its response (checking the correlation id).
    pub async fn call(&mut self, request: Request) -> Result<Response, ErrorResponse> {
        let api = request.api_key();
        let version = request.api_version();
        let id = self.next_id;
        self.next_id += 1;
        let exchange = async {
            self.framed
                .send(RequestFrame::new(id, request))
                .await
                .expect("send request");
            self.framed
                .next()
                .await
                .expect("connection closed before the response")
                .expect("read response")
        };
        let frame = tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .expect("call timed out");
        let response = ResponseFrame::decode_version(api, version, frame).expect("decode response");
        assert_eq!(response.correlation_id, id, "response to another request");
        response.result
    }

    /// Creates a topic.
    pub async fn create_topic(
        &mut self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<(), ErrorResponse> {
        self.call(Request::CreateTopic {
            name: name.into(),
            partitions,
            config,
            replication: None,
        })
        .await
        .map(|_| ())
    }

    /// Acquires the lease of a partition; returns its epoch.
    pub async fn acquire(&mut self, topic: &str, partition: u32) -> Result<u64, ErrorResponse> {
        match self
            .call(Request::AcquireLease {
                topic: topic.into(),
                partition,
                holder: "reliability-test".into(),
                ttl_ms: 60_000,
            })
            .await?
        {
            Response::AcquireLease { epoch, .. } => Ok(epoch),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Produces one batch; returns its base offset.
    pub async fn produce(
        &mut self,
        topic: &str,
        partition: u32,
        batch: Bytes,
    ) -> Result<u64, ErrorResponse> {
        match self
            .call(Request::Produce {
                topic: topic.into(),
                partition,
                batch,
                acks: None,
            })
            .await?
        {
            Response::Produce { base_offset, .. } => Ok(base_offset),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// One fetch: the records it returned (all of them, including those below `offset` in the
    /// first batch) and the high watermark.
    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(Vec<Record>, u64), ErrorResponse> {
        match self
            .call(Request::Fetch {
                topic: topic.into(),
                partition,
                offset,
                max_bytes: 1 << 20,
                max_wait_ms: 0,
                read_committed: None,
            })
            .await?
        {
            Response::Fetch {
                batches,
                high_watermark,
                ..
            } => {
                let joined: Vec<u8> = batches.iter().flat_map(|b| b.iter().copied()).collect();
                let records = decode_batches(Bytes::from(joined)).expect("served batches decode");
                Ok((records, high_watermark))
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// `(earliest, latest, epoch)` of a partition.
    pub async fn list_offsets(&mut self, topic: &str, partition: u32) -> (u64, u64, u64) {
        match self
            .call(Request::ListOffsets {
                topic: topic.into(),
                partition,
                timestamp: None,
            })
            .await
            .expect("list offsets")
        {
            Response::ListOffsets {
                earliest,
                latest,
                epoch,
                ..
            } => (earliest, latest, epoch),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Every record from `from` up to the high watermark, as `(offset, value)`.
    pub async fn read_range(
        &mut self,
        topic: &str,
        partition: u32,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, ErrorResponse> {
        let mut offset = from;
        let mut out = Vec::new();
        while offset < to {
            let (records, _) = self.fetch(topic, partition, offset).await?;
            assert!(!records.is_empty(), "fetch at {offset} made no progress");
            for record in records {
                if record.offset >= offset && record.offset < to {
                    out.push((record.offset, record.value.unwrap_or_default().to_vec()));
                }
                offset = offset.max(record.offset + 1);
            }
        }
        Ok(out)
    }

    /// Whether the server answers at all.
    pub async fn ping(&mut self) {
        self.call(Request::ApiVersions).await.expect("ApiVersions");
    }
}

/// A topic config with the given segment size and flush policy, no retention.
pub fn topic_config(segment_bytes: u64, flush: FlushPolicy) -> TopicConfig {
    TopicConfig {
        segment_bytes,
        flush,
        retention_bytes: None,
        retention_ms: None,
    }
}

/// A batch of one record per value under `epoch`.
pub fn batch(epoch: u64, values: &[Vec<u8>]) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for value in values {
        builder.push(1_000, None, Some(value));
    }
    builder.finish()
}

/// A recognisable value: `tag`, then filler up to `len` bytes.
pub fn value(tag: &str, len: usize) -> Vec<u8> {
    let mut bytes = tag.as_bytes().to_vec();
    bytes.resize(len.max(tag.len()), b'.');
    bytes
}

/// Asserts an error response's code, with its message in the failure.
pub fn assert_code(error: &ErrorResponse, code: ErrorCode) {
    assert_eq!(error.code, code, "unexpected error: {}", error.message);
}

/// A free loopback port never handed out before in this test process, below the kernel's
/// ephemeral range (32768 and up by default).
///
/// Why not port 0's answer: that port is in the ephemeral range, so between the probe releasing
/// it and the child binding it, an outgoing connection (the readiness probe itself, say) can be
/// given it as its source port; a connect to a port nobody listens on yet can even connect to
/// itself (TCP simultaneous open). Tests in one binary also run in parallel, and two probes can
/// return the same port. Ports below the ephemeral range are never picked for outgoing
/// connections, and this process hands each out once.
pub fn unused_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap();
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    for attempt in 0..10_000u64 {
        let port = 20_000 + ((seed.wrapping_add(attempt.wrapping_mul(7919))) % 12_000) as u16;
        if handed_out.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free loopback port in 20000..32000");
}

/// The real `fencelog serve` binary running as a child process on a loopback port, killed when
/// dropped. Its log goes to `log` (a file, so a flood of log lines never blocks it on a pipe).
#[cfg(feature = "cli")]
pub struct ChildServer {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub log: std::path::PathBuf,
}

#[cfg(feature = "cli")]
impl ChildServer {
    /// Starts `fencelog serve --data-dir DATA --listen 127.0.0.1:PORT ARGS...` and waits until it
    /// accepts connections. `shell_prefix`, if given, is bash code run before `exec`ing the
    /// server (to set resource limits, say).
    pub fn spawn(data_dir: &std::path::Path, args: &[&str], shell_prefix: Option<&str>) -> Self {
        let port = unused_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = data_dir.with_extension("server.log");
        let log_file = std::fs::File::create(&log).expect("server log file");
        let binary = super::BIN;
        let listen = addr.to_string();
        let data = data_dir.to_str().expect("utf-8 path");
        let mut server_args = vec!["serve", "--data-dir", data, "--listen", &listen];
        server_args.extend_from_slice(args);
        let mut command = match shell_prefix {
            None => std::process::Command::new(binary),
            Some(prefix) => {
                let mut command = std::process::Command::new("bash");
                command
                    .arg("-c")
                    .arg(format!("{prefix}\nexec \"$0\" \"$@\""))
                    .arg(binary);
                command
            }
        };
        let child = command
            .args(&server_args)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("spawn fencelog serve");
        let mut server = Self { child, addr, log };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(addr).is_ok() {
                return server;
            }
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("server exited with {status}: {}", server.log_text());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "server did not listen: {}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the server logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A line of `/proc/PID/status` in kB (`VmHWM`: peak resident set; `VmRSS`: current).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("server process status");
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status"))
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

#[cfg(feature = "cli")]
impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
