//! The client-connection tests of pg_workfence: one binary (`cargo test -p
//! workfence-harness --release --test client`), one module per topic, so
//! that the harness links once and the topics' tests run side by side.
//! Run one topic with its module path as the filter: `... --test client
//! races::`. Helpers the topics share are in `common/`; what the dashboard's
//! tests share with them too is in the harness library
//! (`workfence_harness::testing`).

mod common;

mod bad_input;
mod bulk;
mod calls;
mod checklist;
mod composition;
mod counters;
mod cycle;
mod dump_restore;
mod durability;
mod examples;
mod failover;
mod first_use;
mod flow_control;
mod layers;
mod life;
mod listing;
mod locks;
mod long_poll;
mod maintenance;
mod memory;
mod model;
mod notify;
mod operating;
mod packaging;
mod pgbouncer;
mod privileges;
mod promises;
mod purge;
mod queue_grants;
mod races;
mod recipe;
mod router;
mod schedules;
mod seed_scenario;
mod server_errors;
mod server_major;
mod soak;
mod upgrade;
mod wake_ups;
mod workflow;
