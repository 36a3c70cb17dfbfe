//! The routes and their handlers. Every input is checked here before it
//! reaches a query: a malformed one is a 400 page, an unknown queue or item
//! a 404 page; the database's own refusals keep their SQLSTATE (error.rs).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{OriginalUri, Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{middleware, Router};
use maud::Markup;

use crate::db::{Conn, Db, Limits, Lookup, RunAt, DEFAULT_PER, ITEM_STATES, PAGE_SIZE};
use crate::error::AppError;
use crate::pages::LeaseStatus;
use crate::throughput::Throughput;
use crate::{metrics, pages, security};

/// Everything the handlers share.
pub struct App {
    /// The database.
    pub db: Db,
    /// The form token of this process (security.rs).
    pub csrf_token: String,
    /// The `user:password` bytes basic auth asks for, if configured.
    pub basic_auth: Option<Vec<u8>>,
    /// The listener is on loopback: only loopback `Host` names are answered.
    pub loopback_only: bool,
    /// The throughput samples.
    pub throughput: Throughput,
}

/// The longest item key or queue name accepted from a request (the
/// extension's own limits are lower; longer input is refused before a query).
const MAX_NAME_BYTES: usize = 1024;

/// The longest `run_at` text a reschedule accepts.
const MAX_RUN_AT_BYTES: usize = 64;

/// The longest delay a reschedule accepts: ten years, in seconds.
const MAX_DELAY_SECONDS: i64 = 10 * 366 * 86_400;

/// The longest `per` text the limits form accepts.
const MAX_PER_BYTES: usize = 64;

/// The router of every page, behind the security middleware.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(queues))
        .route("/style.css", get(style))
        .route("/metrics", get(metrics_text))
        .route("/queues/{queue}", get(items))
        .route("/queues/{queue}/pause", post(pause))
        .route("/queues/{queue}/resume", post(resume))
        .route("/queues/{queue}/limits", post(limits))
        .route("/schedules", get(schedules))
        .route("/schedules/{name}/pause", post(pause_schedule))
        .route("/schedules/{name}/resume", post(resume_schedule))
        .route("/items/{id}", get(item))
        .route("/items/{id}/{action}", post(item_action))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), security::guard))
        .with_state(app)
}

/// The pairs of a query string (lossy: bad UTF-8 is replaced, never an error);
/// the first of a repeated name wins.
fn query_pairs(query: Option<&str>) -> HashMap<String, String> {
    let mut pairs = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        pairs
            .entry(k.into_owned())
            .or_insert_with(|| v.into_owned());
    }
    pairs
}

/// A path parameter, or the 400 page for one that cannot be decoded.
fn path_param<T>(path: Result<Path<T>, PathRejection>) -> Result<T, AppError> {
    path.map(|Path(v)| v).map_err(|e| {
        AppError::bad_request(format!("The address cannot be read: {}", e.body_text()))
    })
}

/// A queue name from the path: not empty, not absurdly long.
fn queue_name(text: String) -> Result<String, AppError> {
    if text.is_empty() || text.len() > MAX_NAME_BYTES {
        return Err(AppError::bad_request(format!(
            "A queue name is 1 to {MAX_NAME_BYTES} bytes long."
        )));
    }
    Ok(text)
}

/// A schedule name from the path: not empty, not absurdly long (the server
/// checks the rest: 22023).
fn schedule_name(text: String) -> Result<String, AppError> {
    if text.is_empty() || text.len() > MAX_NAME_BYTES {
        return Err(AppError::bad_request(format!(
            "A schedule name is 1 to {MAX_NAME_BYTES} bytes long."
        )));
    }
    Ok(text)
}

/// An item id from the path: a whole number from 1 to 2^63 - 1.
pub fn item_id(text: &str) -> Result<i64, AppError> {
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(AppError::bad_request(format!(
            "{text:?} is not an item id: ids are whole numbers from 1 to {}.",
            i64::MAX
        ))),
    }
}

/// The message of a flash code (`?done=...`), for a queue if one is named.
fn flash(params: &HashMap<String, String>) -> Option<String> {
    let queue = params.get("queue");
    let schedule = params.get("schedule");
    let text = match (params.get("done")?.as_str(), queue) {
        ("schedule-paused", _) => format!(
            "Paused schedule {}: it fires nothing until it is resumed.",
            schedule?
        ),
        ("schedule-resumed", _) => format!("Resumed schedule {}.", schedule?),
        ("paused", Some(q)) => {
            format!("Paused queue {q}: claims return nothing until it is resumed.")
        }
        ("resumed", Some(q)) => format!("Resumed queue {q}."),
        ("limits", Some(q)) => format!("Set the limits of queue {q}."),
        ("retried", _) => "Retried: the item is pending again.".to_owned(),
        ("run-now", _) => "Rescheduled: the item is due now.".to_owned(),
        ("rescheduled", _) => "Rescheduled.".to_owned(),
        ("cancelled", _) => "Cancelled.".to_owned(),
        _ => return None,
    };
    Some(text)
}

async fn queues(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Markup, AppError> {
    let params = query_pairs(query.as_deref());
    let conn = app.db.conn().await?;
    let session = conn.session().await?;
    let stats = conn.queue_stats().await?;
    app.throughput.record(
        Instant::now(),
        stats.iter().map(|s| (s.queue.as_str(), s.done + s.failed)),
    );
    let rate = |queue: &str| app.throughput.rate(queue);
    // A pause or resume flash only where the queue is in that state now (a
    // crafted link cannot claim what did not happen); a limits flash only for
    // a queue shown, with its limits as they are now.
    let flash = flash(&params).and_then(|text| {
        let named = params.get("queue");
        let row = stats.iter().find(|s| Some(&s.queue) == named);
        match params.get("done").map(String::as_str) {
            Some(done @ ("paused" | "resumed")) => {
                row.filter(|s| s.paused == (done == "paused")).map(|_| text)
            }
            Some("limits") => row.map(|s| format!("{text} Now: {}.", pages::limits(s))),
            // The schedules page's, which checks them against the schedules.
            Some("schedule-paused" | "schedule-resumed") => None,
            _ => Some(text),
        }
    });
    Ok(pages::queues(
        &session,
        &stats,
        &rate,
        &app.csrf_token,
        flash,
    ))
}

async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        pages::STYLE,
    )
        .into_response()
}

async fn metrics_text(State(app): State<Arc<App>>) -> Result<Response, AppError> {
    let conn = app.db.conn().await?;
    let stats = conn.queue_stats().await?;
    app.throughput.record(
        Instant::now(),
        stats.iter().map(|s| (s.queue.as_str(), s.done + s.failed)),
    );
    // A database older than 0.12.0, or a role that may not read work_schedules: no
    // schedule metrics, the queues' all the same.
    let schedules = if conn.schedules_readable().await? {
        conn.schedules().await?
    } else {
        Vec::new()
    };
    // From 0.12.0 with the library preloaded: the counters and histograms of
    // work_queue_counters (none otherwise; metrics.rs).
    let counters = conn.counters().await?;
    Ok((
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics::render(&stats, &schedules, &counters),
    )
        .into_response())
}

/// `GET /schedules`: every schedule the role may read (`work_schedules`, 0.12.0).
async fn schedules(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Markup, AppError> {
    let params = query_pairs(query.as_deref());
    let conn = app.db.conn().await?;
    let session = conn.session().await?;
    // A database older than 0.12.0 has no schedules; a role without SELECT on the view is
    // refused by the server (42501), as any other read.
    let rows = if session.schedules_exist {
        Some(conn.schedules().await?)
    } else {
        None
    };
    // A pause or resume flash only where the schedule is in that state now.
    let flash = flash(&params).filter(|_| {
        let paused = match params.get("done").map(String::as_str) {
            Some("schedule-paused") => true,
            Some("schedule-resumed") => false,
            _ => return false,
        };
        rows.iter()
            .flatten()
            .any(|s| Some(&s.name) == params.get("schedule") && s.paused == paused)
    });
    Ok(pages::schedules(
        &session,
        rows.as_deref(),
        &app.csrf_token,
        flash,
    ))
}

async fn pause_schedule(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, AppError> {
    schedule_action(app, path, true).await
}

async fn resume_schedule(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, AppError> {
    schedule_action(app, path, false).await
}

/// `POST /schedules/NAME/pause|resume`: `work_pause_schedule` or
/// `work_resume_schedule`; back to the schedules page, whose flash says so.
/// The server's refusals are its pages: 42704 (no such schedule, 404), 42501
/// (no EXECUTE, or queue grants), 25006 (a standby).
async fn schedule_action(
    app: Arc<App>,
    path: Result<Path<String>, PathRejection>,
    pausing: bool,
) -> Result<Response, AppError> {
    let name = schedule_name(path_param(path)?)?;
    let conn = app.db.conn().await?;
    let (changed, done, nothing) = if pausing {
        (
            conn.pause_schedule(&name).await?,
            "schedule-paused",
            format!("work_pause_schedule changed nothing: schedule {name:?} is paused already."),
        )
    } else {
        (
            conn.resume_schedule(&name).await?,
            "schedule-resumed",
            format!("work_resume_schedule changed nothing: schedule {name:?} is not paused."),
        )
    };
    if !changed {
        return Err(AppError::conflict(nothing));
    }
    Ok(Redirect::to(&format!(
        "/schedules?done={done}&schedule={}",
        pages::query_value(&name)
    ))
    .into_response())
}

/// The 404 page of a queue with neither items nor settings the role may read; when the role
/// may not read the settings table, it says so (a queue that has only settings is not found).
fn unknown_queue(queue: &str, settings_read: bool) -> AppError {
    if settings_read {
        AppError::not_found(format!(
            "There is no queue named {queue:?}: it has no items and no settings (or this role may not read it)."
        ))
    } else {
        AppError::not_found(format!(
            "There is no queue named {queue:?} that this role can find: it has no items (or this role may \
             not read it), and this role may not read the queues' settings (SELECT on workfence.queues), \
             so a queue that has only settings (a pause, limits) is not found either."
        ))
    }
}

/// Nothing when `queue` has items or settings the role may read ([`Conn::queue_lookup`],
/// index probes only: a queue that does not exist costs no scan of the items), else its
/// 404 page.
async fn known_queue(conn: &Conn, queue: &str) -> Result<(), AppError> {
    match conn.queue_lookup(queue).await? {
        Lookup::Known => Ok(()),
        Lookup::Unknown { settings_read } => Err(unknown_queue(queue, settings_read)),
    }
}

async fn items(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, AppError> {
    let queue = queue_name(path_param(path)?)?;
    let params = query_pairs(query.as_deref());
    let state = match params.get("state").map(String::as_str) {
        None | Some("") => None,
        Some(s) if ITEM_STATES.contains(&s) => Some(s),
        Some(s) => {
            return Err(AppError::bad_request(format!(
                "{s:?} is not a state to filter by: one of {}, or none for every item.",
                ITEM_STATES.join(", ")
            )))
        }
    };
    let after = match params.get("after").map(String::as_str) {
        None | Some("") => None,
        Some(text) => Some(item_id(text).map_err(|_| {
            AppError::bad_request(format!(
                "after={text:?} is not an item id: the next page link names the last id of the page before, \
                 a whole number from 1 to {}.",
                i64::MAX
            ))
        })?),
    };
    let conn = app.db.conn().await?;
    let session = conn.session().await?;
    // The queue's schedules (0.12.0): a few rows of the schedules table, whatever the items.
    let schedules = if session.schedules_readable {
        conn.queue_schedules(&queue).await?
    } else {
        Vec::new()
    };
    if let Some(key) = params.get("key").filter(|k| k.len() > MAX_NAME_BYTES) {
        return Err(AppError::bad_request(format!(
            "A key is at most {MAX_NAME_BYTES} bytes long ({} bytes given).",
            key.len()
        )));
    }
    // An unknown queue is a 404 before anything is listed: a listing of done, failed or
    // cancelled items walks the finished items of every queue, newest first, until it has a
    // page of this queue's (docs/dashboard-render.md), so for a queue that has none it would
    // read them all. The look-up probes indexes only. A queue that only a schedule names
    // (it has not fired yet) is a queue too.
    if schedules.is_empty() {
        known_queue(&conn, &queue).await?;
    }
    if let Some(key) = params.get("key").filter(|k| !k.is_empty()) {
        return match conn.item_id_by_key(&queue, key).await? {
            Some(id) => Ok(Redirect::to(&pages::item_href(id)).into_response()),
            None => Err(AppError::not_found(format!(
                "There is no item with key {key:?} in queue {queue:?}."
            ))),
        };
    }
    let mut rows = conn.items(&queue, state, after, PAGE_SIZE + 1).await?;
    let next_after = if rows.len() > PAGE_SIZE as usize {
        rows.truncate(PAGE_SIZE as usize);
        rows.last().map(|r| r.id)
    } else {
        None
    };
    // An empty page after an item: that item left the listing (the page
    // starts after its place as it is now, and it has none), or the items
    // that followed it did.
    let after_left = match after {
        Some(after) if rows.is_empty() => match conn.item(after).await? {
            None => Some("purged: no item has that id".to_owned()),
            Some(it) if it.queue != queue => Some("it is an item of another queue".to_owned()),
            Some(it) if state.is_some_and(|s| it.state != s) => {
                Some(format!("it is {} now", it.state))
            }
            Some(_) => None,
        },
        _ => None,
    };
    let may_operate = conn.may_operate(&queue).await?;
    let counters = conn.queue_counters(&queue).await?;
    // The queue's last hour (0.12.0): one query of shared memory, no item read.
    let history = conn.queue_history(&session, &queue).await?;
    Ok(pages::items(
        &session,
        &pages::ItemsView {
            queue: &queue,
            state,
            rows: &rows,
            next_after,
            after,
            after_left,
            may_operate,
            schedules: &schedules,
            counters: counters.as_ref(),
            history: &history,
        },
        &app.csrf_token,
    )
    .into_response())
}

async fn item(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Markup, AppError> {
    let id = item_id(&path_param(path)?)?;
    let params = query_pairs(query.as_deref());
    let conn = app.db.conn().await?;
    let Some(item) = conn.item(id).await? else {
        return Err(AppError::not_found(format!(
            "There is no item {id} (or this role may not read its queue)."
        )));
    };
    let session = conn.session().await?;
    // Only an insufficient privilege means the role may not ask; any other
    // error of work_lease_status is the page's error.
    let status = match (&item.owner, item.epoch, session.lease_status) {
        (Some(owner), Some(epoch), true) => match conn.lease_status(id, owner, epoch).await {
            Ok(status) => LeaseStatus::Said(status),
            Err(e) if e.sqlstate() == Some("42501") => LeaseStatus::Refused,
            Err(e) => return Err(e),
        },
        // No EXECUTE on work_lease_status (or no lease to ask about).
        _ => LeaseStatus::NotCallable,
    };
    let words = pages::lease_words(&item, &status);
    // The workflow around the item (0.12.0): index probes of the edges, at most 1000 rows.
    let workflow = conn.workflow(&session, id).await?;
    Ok(pages::item(
        &session,
        &pages::ItemView {
            item: &item,
            lease: &words,
            workflow: &workflow,
        },
        &app.csrf_token,
        flash(&params),
    ))
}

/// A queue action's redirect back to the queues page, with its flash.
fn back_to_queues(done: &str, queue: &str) -> Response {
    Redirect::to(&format!(
        "/?done={done}&queue={}",
        pages::query_value(queue)
    ))
    .into_response()
}

async fn pause(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, AppError> {
    queue_action(app, path, true).await
}

async fn resume(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, AppError> {
    queue_action(app, path, false).await
}

async fn queue_action(
    app: Arc<App>,
    path: Result<Path<String>, PathRejection>,
    pausing: bool,
) -> Result<Response, AppError> {
    let queue = queue_name(path_param(path)?)?;
    let conn = app.db.conn().await?;
    if pausing {
        // work_pause makes a queue's settings: never for a queue that does not exist.
        known_queue(&conn, &queue).await?;
        if !conn.pause(&queue).await? {
            return Err(AppError::conflict(format!(
                "work_pause changed nothing: queue {queue:?} is paused already."
            )));
        }
        Ok(back_to_queues("paused", &queue))
    } else {
        // work_resume makes nothing: a true answer is a queue that was paused, one that
        // exists, even for a role that may not read the settings to find it (a paused queue
        // whose items are all gone); only a false one asks whether the queue exists at all.
        if !conn.resume(&queue).await? {
            known_queue(&conn, &queue).await?;
            return Err(AppError::conflict(format!(
                "work_resume changed nothing: queue {queue:?} is not paused."
            )));
        }
        Ok(back_to_queues("resumed", &queue))
    }
}

/// A limit field of the limits form: empty (or blank) is `None`, which lifts
/// the limit; else a whole number, whose range the server checks (22023).
fn limit_field(body: &[u8], name: &str) -> Result<Option<i32>, AppError> {
    match security::form_field(body, name) {
        None => Ok(None),
        Some(text) if text.trim().is_empty() => Ok(None),
        Some(text) => text.trim().parse::<i32>().map(Some).map_err(|_| {
            AppError::bad_request(format!(
                "{name}={text:?} is not a limit: a whole number, or empty to lift the limit."
            ))
        }),
    }
}

/// The limits a limits form sets: `concurrency`, `rate` and `per_group`
/// (empty: `None`, NULL), and `per` (empty: [`DEFAULT_PER`], `work_limit`'s
/// default). The values' ranges are the server's to check.
pub fn limits_of_form(body: &[u8]) -> Result<Limits, AppError> {
    let per = security::form_field(body, "per")
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_PER.to_owned());
    if per.len() > MAX_PER_BYTES {
        return Err(AppError::bad_request(format!(
            "per is the rate limit's window, such as 1 minute or 00:00:10, at most {MAX_PER_BYTES} bytes."
        )));
    }
    Ok(Limits {
        concurrency: limit_field(body, "concurrency")?,
        rate: limit_field(body, "rate")?,
        per,
        per_group: limit_field(body, "per_group")?,
    })
}

/// `POST /queues/NAME/limits`: `work_limit` with the form's values, every
/// limit at once; back to the queues page, whose flash shows them.
async fn limits(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, AppError> {
    let queue = queue_name(path_param(path)?)?;
    let limits = limits_of_form(&body)?;
    let conn = app.db.conn().await?;
    // work_limit makes a queue's settings: never for a queue that does not exist.
    known_queue(&conn, &queue).await?;
    conn.limit(&queue, &limits).await?;
    Ok(back_to_queues("limits", &queue))
}

/// When a reschedule form asks the item to run: `run_at` (a UTC time, as a
/// `datetime-local` input sends it) if given, else `delay` seconds from now.
pub fn run_at_of_form(body: &[u8]) -> Result<RunAt, AppError> {
    let run_at = security::form_field(body, "run_at").filter(|v| !v.trim().is_empty());
    let delay = security::form_field(body, "delay").filter(|v| !v.trim().is_empty());
    match (run_at, delay) {
        (Some(text), _) => {
            if text.len() > MAX_RUN_AT_BYTES {
                return Err(AppError::bad_request(format!(
                    "run_at is a time such as 2030-01-31T12:00, at most {MAX_RUN_AT_BYTES} bytes."
                )));
            }
            Ok(RunAt::Utc(text.trim().to_owned()))
        }
        (None, Some(text)) => match text.trim().parse::<i64>() {
            Ok(s) if (0..=MAX_DELAY_SECONDS).contains(&s) => Ok(RunAt::In(s)),
            _ => Err(AppError::bad_request(format!(
                "delay={text:?} is not a delay: whole seconds from 0 to {MAX_DELAY_SECONDS}."
            ))),
        },
        (None, None) => Err(AppError::bad_request(
            "Say when: a time (run_at, UTC) or a delay in seconds (delay).",
        )),
    }
}

async fn item_action(
    State(app): State<Arc<App>>,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Bytes,
) -> Result<Response, AppError> {
    let (id, action) = path_param(path)?;
    if !matches!(
        action.as_str(),
        "retry" | "run-now" | "reschedule" | "cancel"
    ) {
        return Err(AppError::not_found(format!(
            "There is no item action {action:?}: retry, run-now, reschedule or cancel."
        )));
    }
    let id = item_id(&id)?;
    let run_at = if action == "reschedule" {
        Some(run_at_of_form(&body)?)
    } else {
        None
    };
    let conn = app.db.conn().await?;
    let Some(item) = conn.item(id).await? else {
        return Err(AppError::not_found(format!(
            "There is no item {id} (or this role may not read its queue)."
        )));
    };
    let (queue, key, state) = (&item.queue, &item.key, &item.state);
    let (changed, done, nothing) = match action.as_str() {
        "retry" => (
            conn.retry(queue, key).await?,
            "retried",
            format!("work_retry changed nothing: only a failed or cancelled item goes back (to pending, or to waiting for its parents), and this one is {state}."),
        ),
        "run-now" => (
            conn.reschedule(queue, key, &RunAt::Now).await?,
            "run-now",
            format!("work_reschedule changed nothing: only a pending item can be rescheduled, and this one is {state}."),
        ),
        "reschedule" => (
            conn.reschedule(queue, key, run_at.as_ref().unwrap_or(&RunAt::Now)).await?,
            "rescheduled",
            format!("work_reschedule changed nothing: only a pending item can be rescheduled, and this one is {state}."),
        ),
        _ => (
            conn.cancel(queue, key).await?,
            "cancelled",
            format!("work_cancel changed nothing: only a waiting, pending or claimed item can be cancelled, and this one is {state}."),
        ),
    };
    if !changed {
        return Err(AppError::conflict(nothing));
    }
    Ok(Redirect::to(&format!("{}?done={done}", pages::item_href(id))).into_response())
}

async fn not_found(OriginalUri(uri): OriginalUri) -> AppError {
    AppError::not_found(format!("There is no page at {}.", uri.path()))
}

async fn method_not_allowed() -> AppError {
    AppError::Status {
        status: StatusCode::METHOD_NOT_ALLOWED,
        title: "Method not allowed",
        message: "This address does not take that method (pages are read with GET, actions are forms sent with POST)."
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert_eq!(item_id("42").unwrap(), 42);
        for bad in ["abc", "0", "-1", "9223372036854775808", "", "1.5", " 1"] {
            assert_eq!(
                item_id(bad).unwrap_err().status(),
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
    }

    #[test]
    fn reschedule_forms() {
        assert_eq!(run_at_of_form(b"csrf=x&delay=60").unwrap(), RunAt::In(60));
        assert_eq!(
            run_at_of_form(b"run_at=2030-01-31T12%3A00&delay=").unwrap(),
            RunAt::Utc("2030-01-31T12:00".into())
        );
        for bad in [
            &b"delay=-1"[..],
            b"delay=abc",
            b"delay=99999999999999999999",
            b"",
            b"run_at=&delay=",
        ] {
            assert!(run_at_of_form(bad).is_err());
        }
    }

    #[test]
    fn limits_forms() {
        assert_eq!(
            limits_of_form(b"csrf=x&concurrency=4&rate=+100&per=1+minute&per_group=3").unwrap(),
            Limits {
                concurrency: Some(4),
                rate: Some(100),
                per: "1 minute".into(),
                per_group: Some(3),
            }
        );
        // Empty lifts a limit; an empty per is work_limit's default.
        assert_eq!(
            limits_of_form(b"concurrency=&rate=%20&per=&per_group=").unwrap(),
            Limits {
                concurrency: None,
                rate: None,
                per: DEFAULT_PER.into(),
                per_group: None,
            }
        );
        assert_eq!(limits_of_form(b"").unwrap().per, DEFAULT_PER);
        // Out of range is the server's to refuse (22023), not a whole number ours.
        assert_eq!(
            limits_of_form(b"concurrency=0").unwrap().concurrency,
            Some(0)
        );
        let long_per = format!("per={}", "1".repeat(MAX_PER_BYTES + 1));
        for bad in [
            &b"concurrency=abc"[..],
            b"rate=1.5",
            b"per_group=99999999999",
            long_per.as_bytes(),
        ] {
            assert_eq!(
                limits_of_form(bad).unwrap_err().status(),
                StatusCode::BAD_REQUEST
            );
        }
    }

    #[test]
    fn flashes() {
        let p = query_pairs(Some("done=paused&queue=a%3Cb"));
        assert_eq!(
            flash(&p).unwrap(),
            "Paused queue a<b: claims return nothing until it is resumed."
        );
        assert_eq!(flash(&query_pairs(Some("done=bogus"))), None);
        assert_eq!(
            flash(&query_pairs(Some("done=schedule-paused&schedule=a%26b"))).unwrap(),
            "Paused schedule a&b: it fires nothing until it is resumed."
        );
        assert_eq!(flash(&query_pairs(Some("done=schedule-resumed"))), None);
        assert_eq!(flash(&query_pairs(Some("%ff=%fe"))), None);
    }
}
