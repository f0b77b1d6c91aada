//! The embedded API server's protocol, checked through kube-client as controllers use it.

mod common;
mod crud;
mod faults;
mod kubectl;
mod list;
mod watch;
