//! The workqueue suite: its contract rule by rule (`queue`), priorities and aging
//! (`priority`), fairness keys (`fairness`), a property test against a reference model (`model`), and producers and
//! workers on a multi-threaded runtime (`stress`). One test binary, as the other suites.

mod fairness;
mod model;
mod priority;
mod queue;
mod stress;
