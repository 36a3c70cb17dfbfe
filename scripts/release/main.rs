//! The release test's Rust worker (scripts/release-test.sh): built in a fresh cargo project whose
//! only path dependency is the unpacked `workfence` crate file, never this workspace.
//!
//! usage: release-worker DSN
//! Enqueues three items into queue `release-rust` with the library, works them with its Worker
//! (each handler returns its result: work_finish), and exits 0 once the server says all three are
//! done with their results, 1 otherwise (after 60 s at most).

use std::time::Duration;

use serde_json::json;
use workfence::{EnqueueOptions, Job, Worker};

const QUEUE: &str = "release-rust";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dsn = std::env::args().nth(1).ok_or("usage: release-worker DSN")?;
    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    for n in 0..3 {
        workfence::enqueue(
            &client,
            QUEUE,
            &json!({ "n": n }),
            &EnqueueOptions::default().key(format!("k{n}")),
        )
        .await?;
    }
    let worker = Worker::builder(&dsn, QUEUE)
        .poll_wait(Duration::from_secs(1))
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        worker
            .run(
                |job: Job| async move { Ok(Some(json!({ "doubled": job.payload["n"].as_i64().unwrap_or(-1) * 2 }))) },
                async move {
                    let _ = stopped.await;
                },
            )
            .await
    });
    let mut results: Vec<i32> = Vec::new();
    for _ in 0..600 {
        results = client
            .query(
                "SELECT (result->>'doubled')::int FROM workfence.items \
                 WHERE queue = $1 AND state = 'done' ORDER BY key",
                &[&QUEUE],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if results.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    running.await??;
    println!("rust workfence: done {results:?}");
    if results == [0, 2, 4] {
        Ok(())
    } else {
        Err(format!("expected [0, 2, 4], got {results:?}").into())
    }
}
