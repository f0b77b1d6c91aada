//! `meta.k8s.io` `Table`s: what `kubectl get` asks for (`Accept:
//! application/json;as=Table;g=meta.k8s.io;v=v1`) and prints, column for column.
//!
//! The columns and cells are the kind's strategy's (`Strategy::columns` and `cells`, kube's
//! `TableConvertor`: see `registry::printers` for the defaults and the real servers they were
//! read off); this module assembles the Table. Each row carries the object as `includeObject`
//! asks: `Metadata` (the default, `PartialObjectMetadata`), `Object` (whole) or `None`
//! (null). In a watch each event's object is a one-row table; only the first carries the
//! column definitions.

use serde_json::{Value, json};

use crate::model::resources::ResourceType;
use crate::registry::Registry;
use crate::registry::printers::unix_now;

/// What each row carries of its object (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Include {
    None,
    /// Unset, as on the real server.
    #[default]
    Metadata,
    Object,
}

impl Include {
    pub(crate) fn parse(value: Option<&str>) -> Self {
        match value {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// A Table of `objects` of `rt`, printed by its strategy in `registry`, with `metadata` (the
/// list's, or the one object's resourceVersion).
pub(crate) fn table(
    registry: &Registry,
    rt: &ResourceType,
    version: &str,
    metadata: Value,
    objects: &[Value],
    include: Include,
    with_columns: bool,
) -> Value {
    let strategy = registry.strategy(rt);
    let now = unix_now();
    let columns: Vec<Value> = strategy
        .columns(rt)
        .into_iter()
        .map(|c| {
            let description =
                c.json_path.map_or_else(|| c.name.clone(), |p| format!("{} ({p})", c.name));
            json!({
                "name": c.name,
                "type": c.kind,
                "format": c.format,
                "description": description,
                "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let object = match include {
                Include::None => Value::Null,
                Include::Object => o.clone(),
                Include::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": format!("meta.k8s.io/{version}"),
                    "metadata": o["metadata"],
                }),
            };
            json!({ "cells": strategy.cells(rt, o, now), "object": object })
        })
        .collect();
    let mut out = json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": metadata,
        "rows": rows,
    });
    if with_columns {
        out["columnDefinitions"] = json!(columns);
    }
    out
}
