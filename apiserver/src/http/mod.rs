//! Layer 3, HTTP: kube-apiserver's `pkg/endpoints` here. It may import every layer below
//! (`model`, `storage`, `merge`, `protobuf`, `auth`, `registry`, `admission`, `conversion`,
//! `faults`), never `server` or `harness`, and offers [`handler::handle`], the entry point that
//! routes, negotiates, serves and encodes every request, with the state and layers it needs.

pub(crate) mod discovery;
pub(crate) mod encoding;
pub(crate) mod field_validation;
pub(crate) mod handler;
pub(crate) mod limits;
pub(crate) mod list;
pub(crate) mod negotiate;
pub(crate) mod open_watches;
pub(crate) mod openapi;
pub(crate) mod options;
pub(crate) mod panics;
pub(crate) mod rest;
pub(crate) mod route;
pub(crate) mod state;
pub(crate) mod table;
pub(crate) mod views;
pub(crate) mod watch;
