//! The line protocol between [`Worker`](crate::Worker) and the
//! `workfence-worker` process.
//!
//! One command per line on the worker's stdin, one reply per line on its
//! stdout. A command is a verb and fields separated by whitespace; the last
//! field of a verb takes the rest of the line, so an interval may contain spaces
//! (`2 seconds`). Queue names and keys are single fields and so cannot contain
//! whitespace here (the extension allows it; this protocol does not).
//!
//! | command | runs | reply |
//! |---|---|---|
//! | `ping` | `pg_backend_pid()` | `pong` |
//! | `claim <queue> <max_items> <lease>` | `work_claim` | `claims` |
//! | `claim_key <queue> <key> <lease>` | `work_claim_key` | `claims` (0 or 1) |
//! | `renew <id> <epoch> <lease>` | `work_renew` | `bool` |
//! | `finish <id> <epoch> [result json]` | `work_finish` | `bool` |
//! | `release <id> <epoch> [delay]` | `work_release` | `bool` |
//! | `fail <id> <epoch> <retry_in or -> <error text>` | `work_fail` | `bool` |
//! | `assert <id> <epoch>` | `BEGIN; work_assert; COMMIT` | `done` |
//! | `quit` | closes the connection | `bye`, then the process exits |
//!
//! Every reply is one line of JSON tagged by `"reply"`, e.g.
//! `{"reply":"bool","value":false}`. A command the server rejects gets
//! `{"reply":"error","error":{"sqlstate":"55000",...}}`; a line the worker
//! cannot parse gets `{"reply":"refused","message":...}`. On start-up, after it
//! has connected, the worker writes one `ready` line.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ServerError;

/// One claimed item, as `work_claim` / `work_claim_key` return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Item id.
    pub id: i64,
    /// Item key.
    pub key: String,
    /// The payload given at enqueue.
    pub payload: Value,
    /// The fencing token of this claim.
    pub epoch: i64,
    /// Which attempt this claim is (1 for the first).
    pub attempt: i32,
    /// When the lease lapses, server time, as the server renders it
    /// (`timestamptz::text`); this crate never reads the client's clock.
    pub lease_until: String,
}

/// A command for the worker process.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Report the backend pid of the worker's connection.
    Ping,
    /// `work_claim(queue, owner, lease, max_items)`.
    Claim {
        /// Queue name (no whitespace).
        queue: String,
        /// Most items to take.
        max_items: i32,
        /// Lease length, any PostgreSQL interval text.
        lease: String,
    },
    /// `work_claim_key(queue, key, owner, lease)`.
    ClaimKey {
        /// Queue name (no whitespace).
        queue: String,
        /// Item key (no whitespace).
        key: String,
        /// Lease length, any PostgreSQL interval text.
        lease: String,
    },
    /// `work_renew(id, owner, epoch, lease)`.
    Renew {
        /// Item id.
        id: i64,
        /// The token's epoch.
        epoch: i64,
        /// New lease length from now (server time).
        lease: String,
    },
    /// `work_finish(id, owner, epoch, result)`.
    Finish {
        /// Item id.
        id: i64,
        /// The token's epoch.
        epoch: i64,
        /// Optional result to store.
        result: Option<Value>,
    },
    /// `work_release(id, owner, epoch, delay)`.
    Release {
        /// Item id.
        id: i64,
        /// The token's epoch.
        epoch: i64,
        /// Delay before the item is claimable again; `None` for the default.
        delay: Option<String>,
    },
    /// `work_fail(id, owner, epoch, error, retry_in)`.
    Fail {
        /// Item id.
        id: i64,
        /// The token's epoch.
        epoch: i64,
        /// Retry delay (a single field, e.g. `00:00:30`); `None` for backoff.
        retry_in: Option<String>,
        /// Error text to record.
        error: String,
    },
    /// `work_assert(id, owner, epoch)`.
    Assert {
        /// Item id.
        id: i64,
        /// The token's epoch.
        epoch: i64,
    },
    /// Close the connection and exit.
    Quit,
}

/// A reply from the worker process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Sent once at start-up, after connecting.
    Ready {
        /// The owner name the worker claims with.
        owner: String,
        /// The worker's OS process id.
        pid: u32,
        /// The server backend pid of its connection.
        backend_pid: i32,
    },
    /// Reply to `ping`.
    Pong {
        /// The server backend pid of the worker's connection.
        backend_pid: i32,
    },
    /// Reply to `claim` and `claim_key`.
    Claims {
        /// The rows returned.
        claims: Vec<Claim>,
    },
    /// Reply to `renew`, `finish`, `release` and `fail`.
    Bool {
        /// The function's result.
        value: bool,
    },
    /// Reply to `assert` when it did not raise.
    Done,
    /// The server raised an error for the command.
    Error {
        /// The error.
        error: ServerError,
    },
    /// The worker did not understand the command line.
    Refused {
        /// Why.
        message: String,
    },
    /// Reply to `quit`.
    Bye,
}

/// Splits off the next whitespace-separated field.
fn next_field<'a>(rest: &mut &'a str, name: &str) -> Result<&'a str, String> {
    let s = rest.trim_start();
    if s.is_empty() {
        return Err(format!("missing <{name}>"));
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    let (field, tail) = s.split_at(end);
    *rest = tail;
    Ok(field)
}

/// The rest of the line, trimmed; `None` when empty.
fn tail(rest: &str) -> Option<&str> {
    let t = rest.trim();
    (!t.is_empty()).then_some(t)
}

fn number<T: std::str::FromStr>(field: &str, name: &str) -> Result<T, String> {
    field
        .parse()
        .map_err(|_| format!("<{name}> is not a number: {field:?}"))
}

fn no_more(rest: &str) -> Result<(), String> {
    match tail(rest) {
        None => Ok(()),
        Some(extra) => Err(format!("unexpected trailing text: {extra:?}")),
    }
}

impl Command {
    /// Parses one command line (without its newline).
    pub fn parse(line: &str) -> Result<Command, String> {
        let mut rest = line;
        let verb = next_field(&mut rest, "command")?;
        let cmd = match verb {
            "ping" => Command::Ping,
            "quit" => Command::Quit,
            "claim" => {
                let queue = next_field(&mut rest, "queue")?.to_owned();
                let max_items = number(next_field(&mut rest, "max_items")?, "max_items")?;
                let lease = tail(rest).ok_or("missing <lease>")?.to_owned();
                return Ok(Command::Claim {
                    queue,
                    max_items,
                    lease,
                });
            }
            "claim_key" => {
                let queue = next_field(&mut rest, "queue")?.to_owned();
                let key = next_field(&mut rest, "key")?.to_owned();
                let lease = tail(rest).ok_or("missing <lease>")?.to_owned();
                return Ok(Command::ClaimKey { queue, key, lease });
            }
            "renew" | "finish" | "release" | "fail" | "assert" => {
                let id = number(next_field(&mut rest, "id")?, "id")?;
                let epoch = number(next_field(&mut rest, "epoch")?, "epoch")?;
                return match verb {
                    "renew" => Ok(Command::Renew {
                        id,
                        epoch,
                        lease: tail(rest).ok_or("missing <lease>")?.to_owned(),
                    }),
                    "finish" => {
                        let result = tail(rest)
                            .map(serde_json::from_str)
                            .transpose()
                            .map_err(|e| format!("<result> is not JSON: {e}"))?;
                        Ok(Command::Finish { id, epoch, result })
                    }
                    "release" => Ok(Command::Release {
                        id,
                        epoch,
                        delay: tail(rest).map(str::to_owned),
                    }),
                    "fail" => {
                        let retry = next_field(&mut rest, "retry_in")?;
                        let retry_in = (retry != "-").then(|| retry.to_owned());
                        let error = tail(rest).ok_or("missing <error>")?.to_owned();
                        Ok(Command::Fail {
                            id,
                            epoch,
                            retry_in,
                            error,
                        })
                    }
                    _ => {
                        no_more(rest)?;
                        Ok(Command::Assert { id, epoch })
                    }
                };
            }
            other => return Err(format!("unknown command {other:?}")),
        };
        no_more(rest)?;
        Ok(cmd)
    }

    /// Renders the command as one line (without newline); fails when a value
    /// cannot be carried by the protocol (whitespace in a single field, a line
    /// break anywhere).
    pub fn to_line(&self) -> Result<String, String> {
        fn single<'a>(value: &'a str, name: &str) -> Result<&'a str, String> {
            if value.is_empty() || value.contains(char::is_whitespace) {
                Err(format!(
                    "<{name}> {value:?} must be non-empty and free of whitespace in the worker protocol"
                ))
            } else {
                Ok(value)
            }
        }
        fn rest<'a>(value: &'a str, name: &str) -> Result<&'a str, String> {
            if value.trim().is_empty() || value.contains(['\n', '\r']) {
                Err(format!(
                    "<{name}> {value:?} must be non-empty and on one line in the worker protocol"
                ))
            } else {
                Ok(value)
            }
        }
        Ok(match self {
            Command::Ping => "ping".to_owned(),
            Command::Quit => "quit".to_owned(),
            Command::Claim {
                queue,
                max_items,
                lease,
            } => format!(
                "claim {} {max_items} {}",
                single(queue, "queue")?,
                rest(lease, "lease")?
            ),
            Command::ClaimKey { queue, key, lease } => format!(
                "claim_key {} {} {}",
                single(queue, "queue")?,
                single(key, "key")?,
                rest(lease, "lease")?
            ),
            Command::Renew { id, epoch, lease } => {
                format!("renew {id} {epoch} {}", rest(lease, "lease")?)
            }
            Command::Finish { id, epoch, result } => match result {
                // serde_json's compact form never contains a raw line break.
                Some(v) => format!("finish {id} {epoch} {v}"),
                None => format!("finish {id} {epoch}"),
            },
            Command::Release { id, epoch, delay } => match delay {
                Some(d) => format!("release {id} {epoch} {}", rest(d, "delay")?),
                None => format!("release {id} {epoch}"),
            },
            Command::Fail {
                id,
                epoch,
                retry_in,
                error,
            } => format!(
                "fail {id} {epoch} {} {}",
                match retry_in {
                    Some(r) if r == "-" => return Err("<retry_in> \"-\" is reserved".into()),
                    Some(r) => single(r, "retry_in")?,
                    None => "-",
                },
                rest(error, "error")?
            ),
            Command::Assert { id, epoch } => format!("assert {id} {epoch}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        let cmds = [
            Command::Ping,
            Command::Quit,
            Command::Claim {
                queue: "q".into(),
                max_items: 3,
                lease: "2 seconds".into(),
            },
            Command::ClaimKey {
                queue: "routines".into(),
                key: "daily-report@2026-11-30T09:00Z".into(),
                lease: "2 seconds".into(),
            },
            Command::Renew {
                id: 1,
                epoch: 7,
                lease: "30 seconds".into(),
            },
            Command::Finish {
                id: 1,
                epoch: 7,
                result: Some(serde_json::json!({"by": "B", "note": "a b"})),
            },
            Command::Finish {
                id: 1,
                epoch: 7,
                result: None,
            },
            Command::Release {
                id: 2,
                epoch: 9,
                delay: Some("5 minutes".into()),
            },
            Command::Release {
                id: 2,
                epoch: 9,
                delay: None,
            },
            Command::Fail {
                id: 3,
                epoch: 4,
                retry_in: Some("00:00:30".into()),
                error: "disk full, try later".into(),
            },
            Command::Fail {
                id: 3,
                epoch: 4,
                retry_in: None,
                error: "boom".into(),
            },
            Command::Assert { id: 5, epoch: 6 },
        ];
        for cmd in cmds {
            let line = cmd.to_line().expect("renders");
            assert_eq!(Command::parse(&line), Ok(cmd), "line {line:?}");
        }
    }

    #[test]
    fn bad_lines_are_refused() {
        for line in [
            "",
            "fly 1 2",
            "renew x 2 1s",
            "renew 1 2",
            "assert 1 2 3",
            "ping now",
            "finish 1 2 {not json",
        ] {
            assert!(Command::parse(line).is_err(), "{line:?} parsed");
        }
        let bad = Command::ClaimKey {
            queue: "q".into(),
            key: "two words".into(),
            lease: "1s".into(),
        };
        assert!(bad.to_line().is_err());
    }

    #[test]
    fn replies_are_one_line() {
        let r = Reply::Error {
            error: ServerError {
                sqlstate: "55000".into(),
                message: "lease lost\nsecond line".into(),
                detail: None,
                hint: None,
            },
        };
        let line = serde_json::to_string(&r).expect("serializes");
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Reply>(&line).expect("parses"), r);
    }
}
