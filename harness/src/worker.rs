//! Drives a `workfence-worker` child process.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command as OsCommand, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use serde_json::Value;

use crate::protocol::{Claim, Command, Reply};
use crate::{Error, Result};

/// How long a worker may take to answer one command before it counts as hung.
/// Every command is one short statement and claims never wait on locks, so a
/// reply that takes this long is a bug worth failing on, not waiting out.
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A `workfence-worker` child process: its own OS process with its own
/// connection, claiming under an owner name. Methods send one command each
/// and wait for its reply (see [`protocol`](crate::protocol)).
///
/// Dropping a worker that was not [`quit`](Worker::quit) kills it.
#[derive(Debug)]
pub struct Worker {
    name: String,
    owner: String,
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<std::io::Result<String>>,
    pid: u32,
    backend_pid: i32,
    timeout: Duration,
}

impl Worker {
    /// Starts `exe` (the `workfence-worker` binary) connecting with `conninfo`
    /// and claiming as `owner`; `name` only labels it in errors. Returns once
    /// the worker has connected.
    pub fn spawn(exe: impl AsRef<Path>, name: &str, conninfo: &str, owner: &str) -> Result<Worker> {
        let exe = exe.as_ref();
        let mut child = OsCommand::new(exe)
            .arg(conninfo)
            .arg(owner)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| Error::Spawn {
                program: exe.display().to_string(),
                source,
            })?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                // Both were asked for as pipes; this cannot happen. Killing
                // an orphan is best effort, the error below is what matters.
                let cleanup = child.kill().and_then(|()| child.wait());
                return Err(Error::Worker {
                    worker: name.to_owned(),
                    message: format!("no stdin/stdout pipe (cleanup: {cleanup:?})"),
                });
            }
        };
        // A reader thread, so that a reply can be waited for with a timeout.
        let (tx, replies) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut worker = Worker {
            name: name.to_owned(),
            owner: owner.to_owned(),
            child,
            stdin: Some(stdin),
            replies,
            pid: 0,
            backend_pid: 0,
            timeout: DEFAULT_REPLY_TIMEOUT,
        };
        match worker.read_reply("start-up")? {
            Reply::Ready {
                pid, backend_pid, ..
            } => {
                worker.pid = pid;
                worker.backend_pid = backend_pid;
                Ok(worker)
            }
            other => Err(worker.unexpected("start-up", &other)),
        }
    }

    /// The label given at [`spawn`](Worker::spawn).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner name the worker claims with.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The worker's OS process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server backend pid of the worker's connection.
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// Changes how long to wait for each reply (default
    /// [`DEFAULT_REPLY_TIMEOUT`]).
    pub fn set_reply_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Asks the worker for its connection's backend pid (a round trip that
    /// touches the server).
    pub fn ping(&mut self) -> Result<i32> {
        match self.request(&Command::Ping)? {
            Reply::Pong { backend_pid } => Ok(backend_pid),
            other => Err(self.unexpected("ping", &other)),
        }
    }

    /// `work_claim(queue, owner, lease, max_items)`: the items claimed, maybe
    /// none.
    pub fn claim(&mut self, queue: &str, max_items: i32, lease: &str) -> Result<Vec<Claim>> {
        let cmd = Command::Claim {
            queue: queue.to_owned(),
            max_items,
            lease: lease.to_owned(),
        };
        match self.request(&cmd)? {
            Reply::Claims { claims } => Ok(claims),
            other => Err(self.unexpected("claim", &other)),
        }
    }

    /// `work_claim_key(queue, key, owner, lease)`: the claim, or `None` when the
    /// item is not claimable (missing, not due, finished, or leased to someone
    /// whose lease has not lapsed).
    pub fn claim_key(&mut self, queue: &str, key: &str, lease: &str) -> Result<Option<Claim>> {
        let cmd = Command::ClaimKey {
            queue: queue.to_owned(),
            key: key.to_owned(),
            lease: lease.to_owned(),
        };
        match self.request(&cmd)? {
            Reply::Claims { mut claims } if claims.len() <= 1 => Ok(claims.pop()),
            other => Err(self.unexpected("claim_key", &other)),
        }
    }

    /// `work_renew(id, owner, epoch, lease)`.
    pub fn renew(&mut self, id: i64, epoch: i64, lease: &str) -> Result<bool> {
        let cmd = Command::Renew {
            id,
            epoch,
            lease: lease.to_owned(),
        };
        self.bool_request("renew", &cmd)
    }

    /// `work_finish(id, owner, epoch, result)`.
    pub fn finish(&mut self, id: i64, epoch: i64, result: Option<Value>) -> Result<bool> {
        self.bool_request("finish", &Command::Finish { id, epoch, result })
    }

    /// `work_release(id, owner, epoch, delay)`; `None` for the default delay.
    pub fn release(&mut self, id: i64, epoch: i64, delay: Option<&str>) -> Result<bool> {
        let cmd = Command::Release {
            id,
            epoch,
            delay: delay.map(str::to_owned),
        };
        self.bool_request("release", &cmd)
    }

    /// `work_fail(id, owner, epoch, error, retry_in)`; `None` for the
    /// extension's backoff. `retry_in` must be one word (`00:00:30`).
    pub fn fail(
        &mut self,
        id: i64,
        epoch: i64,
        error: &str,
        retry_in: Option<&str>,
    ) -> Result<bool> {
        let cmd = Command::Fail {
            id,
            epoch,
            retry_in: retry_in.map(str::to_owned),
            error: error.to_owned(),
        };
        self.bool_request("fail", &cmd)
    }

    /// `work_assert(id, owner, epoch)`. A token that is not current gives
    /// [`Error::Server`] with SQLSTATE `55000` (see [`Error::sqlstate`]).
    pub fn assert(&mut self, id: i64, epoch: i64) -> Result<()> {
        match self.request(&Command::Assert { id, epoch })? {
            Reply::Done => Ok(()),
            other => Err(self.unexpected("assert", &other)),
        }
    }

    /// Asks the worker to close its connection and exit; waits for it.
    pub fn quit(mut self) -> Result<ExitStatus> {
        match self.request(&Command::Quit)? {
            Reply::Bye => {}
            other => return Err(self.unexpected("quit", &other)),
        }
        self.stdin = None;
        self.child.wait().map_err(|e| Error::Worker {
            worker: self.name.clone(),
            message: format!("could not wait for the process: {e}"),
        })
    }

    fn bool_request(&mut self, what: &str, cmd: &Command) -> Result<bool> {
        match self.request(cmd)? {
            Reply::Bool { value } => Ok(value),
            other => Err(self.unexpected(what, &other)),
        }
    }

    /// Sends one command and reads its reply; a server error becomes
    /// [`Error::Server`], a refused line [`Error::Worker`].
    fn request(&mut self, cmd: &Command) -> Result<Reply> {
        let line = cmd.to_line().map_err(|message| Error::Worker {
            worker: self.name.clone(),
            message,
        })?;
        let name = self.name.clone();
        let stdin = self.stdin.as_mut().ok_or_else(|| Error::Worker {
            worker: name.clone(),
            message: "already quit".into(),
        })?;
        if let Err(e) = writeln!(stdin, "{line}").and_then(|()| stdin.flush()) {
            return Err(self.gone(&format!("could not send {line:?}: {e}")));
        }
        match self.read_reply(&line)? {
            Reply::Error { error } => Err(Error::Server {
                worker: self.name.clone(),
                error,
            }),
            Reply::Refused { message } => Err(Error::Worker {
                worker: self.name.clone(),
                message: format!("refused {line:?}: {message}"),
            }),
            reply => Ok(reply),
        }
    }

    fn read_reply(&mut self, what: &str) -> Result<Reply> {
        match self.replies.recv_timeout(self.timeout) {
            Ok(Ok(text)) => serde_json::from_str(&text).map_err(|e| Error::Worker {
                worker: self.name.clone(),
                message: format!("unreadable reply {text:?} to {what:?}: {e}"),
            }),
            Ok(Err(e)) => Err(self.gone(&format!("could not read the reply to {what:?}: {e}"))),
            Err(RecvTimeoutError::Disconnected) => {
                // Closed stdout means it is exiting: wait for the status.
                let status = match self.child.wait() {
                    Ok(s) => format!("exited: {s}"),
                    Err(e) => format!("status unknown: {e}"),
                };
                Err(Error::Worker {
                    worker: self.name.clone(),
                    message: format!(
                        "no reply to {what:?}: the worker closed its stdout ({status})"
                    ),
                })
            }
            Err(RecvTimeoutError::Timeout) => Err(Error::Worker {
                worker: self.name.clone(),
                message: format!("no reply to {what:?} within {:?}", self.timeout),
            }),
        }
    }

    /// An error for a worker that went away, with its exit status if known.
    fn gone(&mut self, message: &str) -> Error {
        let status = match self.child.try_wait() {
            Ok(Some(s)) => format!(" (exited: {s})"),
            Ok(None) => " (still running)".to_owned(),
            Err(e) => format!(" (status unknown: {e})"),
        };
        Error::Worker {
            worker: self.name.clone(),
            message: format!("{message}{status}"),
        }
    }

    fn unexpected(&self, what: &str, reply: &Reply) -> Error {
        Error::Worker {
            worker: self.name.clone(),
            message: format!("unexpected reply to {what}: {reply:?}"),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // Killing (not closing stdin and waiting) keeps drop fast even
            // when the worker hangs; the server sees the connection drop.
            if let Err(e) = self.child.kill() {
                eprintln!(
                    "workfence_harness: could not kill worker {}: {e}",
                    self.name
                );
            }
        }
        if let Err(e) = self.child.wait() {
            eprintln!(
                "workfence_harness: could not reap worker {}: {e}",
                self.name
            );
        }
    }
}
