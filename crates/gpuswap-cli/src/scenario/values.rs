//! What every table's parser shares: the scenario's errors, and the readers of values
//! that name the key and the line of a mistake. A leaf: the tables import it, it imports
//! none of them, so the parser's modules form no circle.

use std::ops::Range;
use std::path::{Path, PathBuf};

use gpuswap_core::PolicySettings;
use gpuswap_sim::units::parse_ns;
use serde::de::DeserializeOwned;
use thiserror::Error;
use toml::Spanned;

/// A scenario file that cannot be used.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why: it cannot be read, or where it stops being UTF-8.
        message: String,
    },
    /// TOML syntax, an unknown key or a value of the wrong type.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line, column and key).
        message: String,
    },
    /// A value of the right type that makes no sense.
    #[error("{path}: {key}{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Value {
        /// The file.
        path: PathBuf,
        /// The key, as a path (`tenant[1].app`).
        key: String,
        /// Line of the value, when known.
        line: Option<usize>,
        /// What is wrong and what was expected.
        message: String,
    },
}

/// How a scenario reports a bad value: key, where in the file, what was expected.
pub(crate) type ValueError<'a> = &'a dyn Fn(String, Option<Range<usize>>, String) -> ScenarioError;

/// Reads scenario text (`path` names it in errors) into the tables of `T`: bad TOML, an
/// unknown key or a value of the wrong type is a [`ScenarioError::Syntax`].
pub(crate) fn deserialize<T: DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<T, ScenarioError> {
    toml::from_str(text).map_err(|e| ScenarioError::Syntax {
        path: path.to_owned(),
        message: crate::text::toml_error(&e),
    })
}

/// Makes the errors about values in `text`, read from `path`: a value's span gives its
/// line.
pub(crate) fn value_error<'a>(
    path: &'a Path,
    text: &'a str,
) -> impl Fn(String, Option<Range<usize>>, String) -> ScenarioError + 'a {
    move |key, span, message| ScenarioError::Value {
        path: path.to_owned(),
        key,
        line: span.map(|s| text[..s.start].lines().count().max(1)),
        message,
    }
}

/// A scenario's name in reports: its file name without extension.
pub(crate) fn name_of(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned())
}

/// `value` at `key` as `parse` reads it: a size with `parse_bytes` (`"100MiB"`), a
/// duration with [`parse_ns`] (`"1.5s"`).
pub(crate) fn parsed<T, E: ToString>(
    value: &Spanned<String>,
    key: String,
    parse: fn(&str) -> Result<T, E>,
    value_error: ValueError,
) -> Result<T, ScenarioError> {
    parse(value.get_ref()).map_err(|e| value_error(key, Some(value.span()), e.to_string()))
}

/// The duration `value` at `key`, which must be above 0: a period or a quantum.
pub(crate) fn positive_ns(
    value: &Spanned<String>,
    key: String,
    value_error: ValueError,
) -> Result<u64, ScenarioError> {
    parse_ns(value.get_ref())
        .ok()
        .filter(|ns| *ns > 0)
        .ok_or_else(|| {
            value_error(
                key,
                Some(value.span()),
                "expected a positive duration with a unit: ns, us, ms or s".into(),
            )
        })
}

/// What `name` names, as `find` finds it. A name that names nothing is an error at
/// `key`: `unknown` says what it is not (`unknown app "x"`), and the `known` names follow.
pub(crate) fn find_named<T>(
    name: &Spanned<String>,
    key: &str,
    find: impl FnOnce(&str) -> Option<T>,
    unknown: impl FnOnce(&str) -> String,
    known: impl FnOnce() -> Vec<&'static str>,
    value_error: ValueError,
) -> Result<T, ScenarioError> {
    find(name.get_ref()).ok_or_else(|| {
        value_error(
            key.into(),
            Some(name.span()),
            format!(
                "{}; expected one of: {}",
                unknown(name.get_ref()),
                known().join(", ")
            ),
        )
    })
}

/// Refuses `what`, which only unified memory has (its fault batches, page streams or
/// kernels' migrations), under a mode that does not page: the one place the scenario
/// asks whether the memory is demand paged.
pub(crate) fn paged_only(
    policy: &PolicySettings,
    what: &str,
    key: String,
    span: Option<Range<usize>>,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    if policy.needs().page_faults {
        return Ok(());
    }
    Err(value_error(
        key,
        span,
        format!(
            "{what}; expected [manager] mode = \"uvm\", not {:?}",
            policy.name()
        ),
    ))
}
