//! `workfence-worker CONNINFO OWNER`: one pg_workfence worker, one connection.
//!
//! Reads commands from stdin, one per line, runs each as one statement on its
//! own connection under OWNER, and writes one JSON reply per line to stdout;
//! see `workfence_harness::protocol` for the commands and replies. On start it
//! connects and writes a `ready` line; it exits on `quit` or at the end of
//! stdin. Diagnostics go to stderr.
//!
//! Every value reaches the server as a statement parameter; nothing is
//! formatted into SQL.

use std::io::{self, BufRead, Write};
use std::process::ExitCode;

use postgres::{Client, NoTls};
use workfence_harness::calls::{self, Token};
use workfence_harness::protocol::{Command, Reply};
use workfence_harness::ServerError;

const USAGE: &str = "usage: workfence-worker CONNINFO OWNER
  CONNINFO  libpq-style connection string, e.g. \"host=127.0.0.1 port=5432 user=postgres dbname=app\"
  OWNER     the owner name to claim under, e.g. routines/laptop
Then one command per line on stdin (ping, claim, claim_key, renew, finish, release, fail, assert, quit);
one JSON reply per line on stdout.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if workfence_harness::cli::help_requested(USAGE) {
        return ExitCode::SUCCESS;
    }
    let (conninfo, owner) = match args.as_slice() {
        [c, o] => (c.clone(), o.clone()),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&conninfo, &owner) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("workfence-worker ({owner}): {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(conninfo: &str, owner: &str) -> Result<(), String> {
    let mut config: postgres::Config = conninfo
        .parse()
        .map_err(|e| format!("bad connection string: {e}"))?;
    // Shows up in pg_stat_activity; the server truncates it to 63 bytes.
    config.application_name(&format!("workfence-worker {owner}"));
    let mut client = config
        .connect(NoTls)
        .map_err(|e| format!("could not connect: {e}"))?;
    let backend_pid: i32 = client
        .query_one("SELECT pg_catalog.pg_backend_pid()", &[])
        .map_err(|e| format!("could not read the backend pid: {e}"))?
        .get(0);

    let mut out = io::stdout().lock();
    send(
        &mut out,
        &Reply::Ready {
            owner: owner.to_owned(),
            pid: std::process::id(),
            backend_pid,
        },
    )?;

    for line in io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("could not read stdin: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match Command::parse(&line) {
            Err(message) => Reply::Refused { message },
            Ok(Command::Quit) => {
                send(&mut out, &Reply::Bye)?;
                return client
                    .close()
                    .map_err(|e| format!("could not close the connection: {e}"));
            }
            Ok(cmd) => match execute(&mut client, owner, &cmd) {
                Ok(reply) => reply,
                Err(err) => match ServerError::from_postgres(&err) {
                    Some(error) => Reply::Error { error },
                    None => {
                        // Not a server error: the connection is gone. Say so
                        // on the protocol, then stop.
                        let error = ServerError {
                            sqlstate: "08006".into(),
                            message: format!("connection failure: {err}"),
                            detail: None,
                            hint: None,
                        };
                        send(&mut out, &Reply::Error { error })?;
                        return Err(format!("connection lost: {err}"));
                    }
                },
            },
        };
        send(&mut out, &reply)?;
    }
    // End of stdin: the driver went away; close politely.
    client
        .close()
        .map_err(|e| format!("could not close the connection: {e}"))
}

fn send(out: &mut impl Write, reply: &Reply) -> Result<(), String> {
    let line =
        serde_json::to_string(reply).map_err(|e| format!("could not encode a reply: {e}"))?;
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("could not write to stdout: {e}"))
}

/// Runs one command as one statement (autocommit).
fn execute(client: &mut Client, owner: &str, cmd: &Command) -> Result<Reply, postgres::Error> {
    match cmd {
        Command::Ping => Ok(Reply::Pong {
            backend_pid: client
                .query_one("SELECT pg_catalog.pg_backend_pid()", &[])?
                .try_get(0)?,
        }),
        Command::Claim {
            queue,
            max_items,
            lease,
        } => Ok(Reply::Claims {
            claims: calls::claim(client, queue, owner, lease, Some(*max_items), None)?,
        }),
        Command::ClaimKey { queue, key, lease } => Ok(Reply::Claims {
            claims: calls::claim_key(client, queue, key, owner, lease)?
                .into_iter()
                .collect(),
        }),
        Command::Renew { id, epoch, lease } => Ok(Reply::Bool {
            value: calls::renew(client, &Token::new(*id, owner, *epoch), lease)?,
        }),
        Command::Finish { id, epoch, result } => Ok(Reply::Bool {
            value: calls::finish(client, &Token::new(*id, owner, *epoch), result.as_ref())?,
        }),
        Command::Release { id, epoch, delay } => Ok(Reply::Bool {
            value: calls::release(client, &Token::new(*id, owner, *epoch), delay.as_deref())?,
        }),
        Command::Fail {
            id,
            epoch,
            retry_in,
            error,
        } => Ok(Reply::Bool {
            value: calls::fail(
                client,
                &Token::new(*id, owner, *epoch),
                error,
                retry_in.as_deref(),
            )?,
        }),
        // work_assert belongs in the transaction that writes the job's
        // effects (outside a transaction block it raises 25P01); the worker
        // has no effects to write, so it asserts in a transaction of its own.
        Command::Assert { id, epoch } => {
            let mut tx = client.transaction()?;
            calls::assert(&mut tx, &Token::new(*id, owner, *epoch))?;
            tx.commit()?;
            Ok(Reply::Done)
        }
        // Handled by the loop before it gets here.
        Command::Quit => Ok(Reply::Bye),
    }
}
