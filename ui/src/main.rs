//! `workfence-ui`: a small web dashboard for pg_workfence.
//!
//! Serves server-rendered pages of the queues (`/`), a queue's items
//! (`/queues/NAME`), one item (`/items/ID`, from 0.12.0 with its workflow's
//! graph), the schedules (`/schedules`,
//! from 0.12.0), operator actions as POST forms through the extension's
//! functions (retry, run now, reschedule, cancel, pause, resume, a queue's
//! limits, pause and resume a schedule), and `/metrics` in the Prometheus
//! text format. It runs as the database role it connects with: a role without
//! the operating functions, or a hot standby, gets read-only pages. See
//! `--help` and `ui/README.md`.

mod charts;
mod cli;
mod db;
mod error;
mod metrics;
mod pages;
mod routes;
mod security;
mod throughput;
mod workflow;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use crate::cli::{Command, Options, BASIC_AUTH_ENV, USAGE};
use crate::routes::App;

fn main() -> ExitCode {
    let command = cli::parse(std::env::args().skip(1), std::env::var(BASIC_AUTH_ENV).ok());
    let options = match command {
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(options)) => options,
        Err(message) => {
            eprintln!("workfence-ui: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("workfence-ui: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(options))
}

/// Binds, prints the address, and serves until SIGINT or SIGTERM.
async fn serve(options: Options) -> ExitCode {
    let db = match db::Db::new(&options.dsn) {
        Ok(db) => db,
        Err(message) => {
            eprintln!("workfence-ui: {message}");
            return ExitCode::from(2);
        }
    };
    let csrf_token = match security::new_token() {
        Ok(token) => token,
        Err(message) => {
            eprintln!("workfence-ui: {message}");
            return ExitCode::FAILURE;
        }
    };
    let app = Arc::new(App {
        db,
        csrf_token,
        basic_auth: options.basic_auth.as_ref().map(security::expected_basic),
        loopback_only: options.listen.ip().is_loopback(),
        throughput: throughput::Throughput::new(),
    });
    let listener = match tokio::net::TcpListener::bind(options.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("workfence-ui: cannot listen on {}: {e}", options.listen);
            return ExitCode::FAILURE;
        }
    };
    let address = match listener.local_addr() {
        Ok(address) => address,
        Err(e) => {
            eprintln!("workfence-ui: cannot read the bound address: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("workfence-ui listening on http://{address}/");
    let _ = std::io::stdout().flush();
    let served = axum::serve(listener, routes::router(app))
        .with_graceful_shutdown(shutdown())
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("workfence-ui: serving failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
