//! Adaptive workers against fixed counts on an I/O-bound reconcile.

fn main() {}
