//! A varied key of a sweep with its values, and how tables and plot labels write a
//! value. The plan, the tables, the summary and the plots all speak of them, so they
//! sit below all of those rather than in any one of them.

use toml::Value;

/// One varied key and its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// Dotted scenario key.
    pub key: String,
    /// Values, as TOML values of the type the scenario uses for the key.
    pub values: Vec<Value>,
}

/// A setting's value as tables and plot labels write it: strings bare, whole tables as
/// `key=value` pairs.
pub(super) fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Table(t) => t
            .iter()
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}
