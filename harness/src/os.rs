//! Small operating-system helpers shared by [`Cluster`](crate::Cluster) and
//! [`PgBouncer`](crate::pgbouncer::PgBouncer): who we run as, the server OS
//! user's ids, a free loopback port, the tail of a log.

use std::ffi::OsStr;
use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Result};

/// The OS user PostgreSQL and PgBouncer run as when this process is root
/// (both refuse to run as root).
pub(crate) const SERVER_OS_USER: &str = "postgres";

/// Loopback only: nothing the tests start is reachable from another machine.
pub(crate) const HOST: &str = "127.0.0.1";

/// Runs a helper program and returns its trimmed stdout.
pub(crate) fn stdout_of(program: &str, args: &[&OsStr]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            program: program.to_owned(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::Command {
            program: program.to_owned(),
            status: output.status,
            output: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// This process's effective uid (0 for root).
pub(crate) fn effective_uid() -> Result<u32> {
    let uid = stdout_of("id", &[OsStr::new("-u")])?;
    uid.parse()
        .map_err(|_| Error::Setup(format!("`id -u` printed {uid:?}")))
}

/// (uid, gid) of [`SERVER_OS_USER`], which must exist when running as root.
pub(crate) fn server_user_ids() -> Result<(u32, u32)> {
    let user = SERVER_OS_USER;
    let parse = |flag: &str| -> Result<u32> {
        let out = stdout_of("id", &[OsStr::new(flag), OsStr::new(user)]).map_err(|e| {
            Error::Setup(format!(
                "the OS user {user:?} is needed to run the servers as root: {e}"
            ))
        })?;
        out.parse()
            .map_err(|_| Error::Setup(format!("`id {flag} {user}` printed {out:?}")))
    };
    Ok((parse("-u")?, parse("-g")?))
}

/// A TCP port on the loopback interface that was free a moment ago.
pub(crate) fn free_port() -> Result<u16> {
    let io_error = |action: &'static str| {
        move |source| Error::Io {
            action,
            path: PathBuf::from(HOST),
            source,
        }
    };
    let listener = TcpListener::bind((HOST, 0)).map_err(io_error("bind a free port on"))?;
    Ok(listener
        .local_addr()
        .map_err(io_error("read the bound port of"))?
        .port())
}

/// The last 20 lines of a log file (or a note that it could not be read).
pub(crate) fn tail_of(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        }
        Err(err) => format!("(could not read {}: {err})", path.display()),
    }
}

/// When root, hands the file `path` to [`SERVER_OS_USER`] (a file the
/// harness writes into a data directory).
pub(crate) fn give_file_to_server_user(path: &Path, as_root: bool) -> Result<()> {
    if !as_root {
        return Ok(());
    }
    let (uid, gid) = server_user_ids()?;
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|source| Error::Io {
        action: "chown to postgres",
        path: path.to_path_buf(),
        source,
    })
}

/// Makes `dir` private (0700) and, when root, hands it to [`SERVER_OS_USER`]
/// and checks that user can reach it (every parent must be searchable).
pub(crate) fn give_to_server_user(dir: &Path, as_root: bool) -> Result<()> {
    let io_error = |action: &'static str| {
        move |source| Error::Io {
            action,
            path: dir.to_path_buf(),
            source,
        }
    };
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_error("chmod"))?;
    if !as_root {
        return Ok(());
    }
    let (uid, gid) = server_user_ids()?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).map_err(io_error("chown to postgres"))?;
    let reachable = server_command(Path::new("test"), true)
        .arg("-w")
        .arg(dir)
        .status()
        .map_err(|source| Error::Spawn {
            program: "runuser".into(),
            source,
        })?;
    if !reachable.success() {
        return Err(Error::Setup(format!(
            "the {SERVER_OS_USER} OS user cannot reach {}: every parent directory must be \
             searchable by it (chmod o+x), or choose a base directory elsewhere",
            dir.display()
        )));
    }
    Ok(())
}

/// A command running `program` as [`SERVER_OS_USER`] when `as_root` (through
/// `runuser -u postgres --`), as this user otherwise; from `/`, since the
/// current directory may be unreadable for that user.
pub(crate) fn server_command(program: &Path, as_root: bool) -> Command {
    let mut cmd = if as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", SERVER_OS_USER, "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.current_dir("/");
    cmd
}
