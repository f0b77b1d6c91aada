//! A running controller's worker count: set by hand, and adaptive.
