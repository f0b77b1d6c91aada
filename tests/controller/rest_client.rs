//! The Manager's request layer: `rest_client_*` counts by code, method and host.
