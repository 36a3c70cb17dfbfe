//! The command line: `workfence-ui --dsn DSN [--listen ADDR] [--basic-auth USER:PASSWORD]`.

use std::net::SocketAddr;

/// The text `--help` prints (and a bad command line, after the error).
pub const USAGE: &str =
    "usage: workfence-ui --dsn DSN [--listen ADDR:PORT] [--basic-auth USER:PASSWORD]
  --dsn DSN          the database to watch, as a libpq key=value string or a postgresql:// URL;
                     the dashboard runs as the role it connects with (read-only unless that
                     role may operate the queues)
  --listen ADDR:PORT the address to serve on (default 127.0.0.1:8080; port 0: a free one);
                     an address other than loopback needs --basic-auth
  --basic-auth USER:PASSWORD
                     ask every request for these credentials (HTTP basic auth; default:
                     $WORKFENCE_UI_BASIC_AUTH, else none). Use it behind TLS.
Prints `workfence-ui listening on http://ADDR/` once it serves.";

/// The environment variable that supplies `--basic-auth` when the option is absent.
pub const BASIC_AUTH_ENV: &str = "WORKFENCE_UI_BASIC_AUTH";

/// Where the dashboard listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The user name and password that basic auth asks for.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name (no `:`, not empty).
    pub user: String,
    /// The password (may contain `:`).
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Parses `USER:PASSWORD` (the first `:` separates them).
    pub fn parse(text: &str) -> Result<Credentials, String> {
        match text.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(Credentials {
                user: user.to_owned(),
                password: password.to_owned(),
            }),
            _ => Err("basic auth must be USER:PASSWORD, both not empty".to_owned()),
        }
    }
}

/// A command line that asks the dashboard to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The connection string, as given.
    pub dsn: String,
    /// The address to bind.
    pub listen: SocketAddr,
    /// The credentials basic auth asks for, if any.
    pub basic_auth: Option<Credentials>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Print [`USAGE`] and exit 0.
    Help,
    /// Serve.
    Run(Options),
}

/// Parses the arguments after the program name; `env_auth` is the value of
/// [`BASIC_AUTH_ENV`]. An error is a message for standard error (exit 2).
pub fn parse(
    args: impl IntoIterator<Item = String>,
    env_auth: Option<String>,
) -> Result<Command, String> {
    let mut dsn = None;
    let mut listen = None;
    let mut auth = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => args.next().ok_or_else(|| format!("{name} needs a value")),
            }
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--dsn" => dsn = Some(value("--dsn")?),
            "--listen" => listen = Some(value("--listen")?),
            "--basic-auth" => auth = Some(value("--basic-auth")?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let dsn = dsn.ok_or("--dsn is required")?;
    let listen_text = listen.unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen: SocketAddr = listen_text.parse().map_err(|_| {
        format!("--listen {listen_text:?} is not an IP address and port (e.g. 127.0.0.1:8080)")
    })?;
    let basic_auth = match auth.or(env_auth.filter(|v| !v.is_empty())) {
        Some(text) => Some(Credentials::parse(&text)?),
        None => None,
    };
    if !listen.ip().is_loopback() && basic_auth.is_none() {
        return Err(format!(
            "refusing to listen on {listen}, which is not a loopback address, without \
             --basic-auth USER:PASSWORD (or ${BASIC_AUTH_ENV}): the dashboard shows every \
             queue's payloads and may operate them"
        ));
    }
    Ok(Command::Run(Options {
        dsn,
        listen,
        basic_auth,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: Option<&str>) -> Result<Options, String> {
        match parse(args.iter().map(|s| s.to_string()), env.map(str::to_owned))? {
            Command::Run(o) => Ok(o),
            Command::Help => Err("help".into()),
        }
    }

    #[test]
    fn defaults_and_forms() {
        let o = run(&["--dsn", "host=x"], None).unwrap();
        assert_eq!(o.listen.to_string(), DEFAULT_LISTEN);
        assert!(o.basic_auth.is_none());
        let o = run(&["--dsn=host=x", "--listen=[::1]:0"], None).unwrap();
        assert_eq!(o.dsn, "host=x");
        assert!(o.listen.ip().is_loopback());
    }

    #[test]
    fn help_wins() {
        assert!(matches!(
            parse(["--help".to_string()], None),
            Ok(Command::Help)
        ));
    }

    #[test]
    fn refusals() {
        assert!(run(&[], None).unwrap_err().contains("--dsn"));
        assert!(run(&["--dsn", "x", "--bogus"], None).is_err());
        assert!(run(&["--dsn", "x", "--listen", "localhost:80"], None).is_err());
        let e = run(&["--dsn", "x", "--listen", "0.0.0.0:8080"], None).unwrap_err();
        assert!(e.contains("--basic-auth"), "{e}");
        assert!(run(&["--dsn", "x", "--basic-auth", "nopassword"], None).is_err());
        assert!(run(&["--dsn", "x", "--basic-auth", ":pw"], None).is_err());
    }

    #[test]
    fn basic_auth_from_option_or_env() {
        let o = run(&["--dsn", "x", "--listen", "0.0.0.0:1"], Some("a:b:c")).unwrap();
        assert_eq!(
            o.basic_auth,
            Some(Credentials {
                user: "a".into(),
                password: "b:c".into()
            })
        );
        let o = run(&["--dsn", "x", "--basic-auth", "u:p"], Some("a:b")).unwrap();
        assert_eq!(o.basic_auth.unwrap().user, "u");
        assert!(format!("{:?}", Credentials::parse("u:secret").unwrap())
            .find("secret")
            .is_none());
    }
}
