//! The runner's log lines are the common spec's (clients/README.md, *Logging*): captured from
//! `tracing`, target `workfence`, while a worker finishes one item and fails another.

mod common;

use serde_json::Value;
use workfence::Job;

#[test]
fn the_log_lines_are_the_common_specs() {
    // The process's only subscriber (this file holds one test: tracing caches per call site
    // whether anybody listens, which a thread-local subscriber beside other tests upsets).
    let capture = common::Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).expect("the only subscriber");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let c = common::connect().await;
        let queue = common::unique("w_logs");
        common::enqueue_n(&c, &queue, 2, 1).await;
        let w = common::worker(&queue).build().expect("build");
        let handle = w.handle();
        let run = async {
            w.run(
                |job: Job| async move {
                    if job.key == "k2" {
                        return Err::<Option<Value>, _>("broken".into());
                    }
                    Ok(None)
                },
                std::future::pending(),
            )
            .await
        };
        let watch = async {
            common::wait_for("both settled", || async {
                let s = common::states(&c, &queue).await;
                (s == [("done".to_owned(), 1), ("failed".to_owned(), 1)]).then_some(())
            })
            .await;
            handle.stop();
        };
        let (result, ()) = tokio::join!(run, watch);
        result.expect("run Ok");
        let k1 = workfence::item(&c, &queue, "k1")
            .await
            .expect("item")
            .expect("exists");
        let k2 = workfence::item(&c, &queue, "k2")
            .await
            .expect("item")
            .expect("exists");
        let lines = capture.lines();
        let (e1, e2) = (k1.epoch.expect("epoch"), k2.epoch.expect("epoch"));
        for want in [
            format!("claim id={} epoch={e1} attempt=1", k1.id),
            format!("claim id={} epoch={e2} attempt=1", k2.id),
            format!("finish id={} epoch={e1} ok", k1.id),
            format!("fail id={} epoch={e2} error=broken", k2.id),
        ] {
            assert!(lines.contains(&want), "no line {want:?} in {lines:#?}");
        }
        assert_eq!(lines.last().map(String::as_str), Some("exit"), "{lines:#?}");
    });
}
