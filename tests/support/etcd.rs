//! An etcd server for the tests that need a real one: started from the `etcd` binary (Debian's
//! `etcd-server`) on free loopback ports with its data in a temp dir (in `/dev/shm` where it
//! exists, so its fsyncs cost nothing), waited for until it answers, killed when dropped.
//!
//! Where `etcd` is not installed, [`EtcdServer::start_or_skip`] prints a note and returns `None`,
//! and the test passes without checking anything (as the kcat tests do); `.ci/run` installs it.
//! [`EtcdServer::restart`] kills the process and starts it again on the same ports and data
//! directory, for the tests of reconnection.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a started etcd may take to answer its health check.
pub const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A running etcd, killed on drop.
pub struct EtcdServer {
    child: Option<Child>,
    directory: TempDir,
    client_port: u16,
    peer_port: u16,
}

impl EtcdServer {
    /// True where the `etcd` binary can be run.
    pub fn available() -> bool {
        Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// A started etcd, or `None` with a note when the binary is missing (the test then skips).
    pub fn start_or_skip(test: &str) -> Option<EtcdServer> {
        if !Self::available() {
            eprintln!(
                "etcd not found: skipping {test} (apt-get install etcd-server; .ci/run does)"
            );
            return None;
        }
        Some(Self::start().expect("start etcd"))
    }

    /// Starts an etcd on free loopback ports, with fast elections (so leases as short as one
    /// second are allowed) and its data in a fresh temp dir.
    pub fn start() -> io::Result<EtcdServer> {
        let shm = Path::new("/dev/shm");
        let directory = if shm.is_dir() {
            tempfile::Builder::new()
                .prefix("fencelog-etcd")
                .tempdir_in(shm)?
        } else {
            tempfile::Builder::new().prefix("fencelog-etcd").tempdir()?
        };
        let mut server = EtcdServer {
            child: None,
            directory,
            client_port: 0,
            peer_port: 0,
        };
        let mut last_error = None;
        // A port picked free may be taken before etcd binds it: try a few pairs.
        for _ in 0..5 {
            server.client_port = free_port()?;
            server.peer_port = free_port()?;
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(error) => {
                    server.kill();
                    // Its member directory names the failed peer URL: start clean.
                    if server.data_dir().exists() {
                        std::fs::remove_dir_all(server.data_dir())?;
                    }
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    /// The client URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Kills etcd (SIGKILL: as abrupt as a crash) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _already_exited = child.kill();
            let _status = child.wait();
        }
    }

    /// Kills etcd and starts it again on the same ports and data: everything written survives.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn_and_wait()
    }

    /// Starts it again after [`kill`](Self::kill).
    pub fn start_again(&mut self) -> io::Result<()> {
        self.spawn_and_wait()
    }

    fn data_dir(&self) -> PathBuf {
        self.directory.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.directory.path().join("etcd.log")
    }

    fn spawn_and_wait(&mut self) -> io::Result<()> {
        let client_url = format!("http://127.0.0.1:{}", self.client_port);
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let child = Command::new("etcd")
            .arg("--name")
            .arg("test")
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("test={peer_url}")])
            // Elections in 500 ms: etcd's shortest lease is 1.5 election timeouts, so 1 s TTLs
            // are honoured (with the default 1 s timeout they would become 2 s).
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + ETCD_READY_TIMEOUT;
        let address = SocketAddr::from(([127, 0, 0, 1], self.client_port));
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    return Err(io::Error::other(format!(
                        "etcd exited with {status}: {}",
                        std::fs::read_to_string(self.log_path()).unwrap_or_default()
                    )));
                }
            }
            if healthy(address) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "etcd did not answer within {ETCD_READY_TIMEOUT:?}: {}",
                    std::fs::read_to_string(self.log_path()).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port the kernel says is free now.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// True when etcd's `/health` answers `"health":"true"` (it has a leader and serves).
fn healthy(address: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return false;
    };
    let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let mut answer = String::new();
    let answered = stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .and_then(|()| stream.write_all(request.as_bytes()))
        .and_then(|()| stream.shutdown(Shutdown::Write))
        .and_then(|()| stream.read_to_string(&mut answer));
    answered.is_ok() && answer.contains("\"health\":\"true\"")
}
