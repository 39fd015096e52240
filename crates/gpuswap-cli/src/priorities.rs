//! Priorities files: buffer and chunk priorities for the `priority-*` chunk policies,
//! written by `gpuswap profile` and read by scenarios (`priorities_file = "..."`).
//!
//! ```toml
//! app = "backprop"            # what the file was derived from (informative)
//! size = "default"
//! granularity = "chunk"
//! [priorities]                # buffer label -> priority (higher stays in VRAM longer)
//! input_hidden_weights = 3
//! [chunk_priorities]          # buffer label -> one priority per chunk
//! input_hidden_weights = [3, 3, 2]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The contents of a priorities file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrioritiesFile {
    /// The app the priorities were derived for.
    pub app: Option<String>,
    /// Its input size.
    pub size: Option<String>,
    /// The profiling granularity: page, chunk or buffer.
    pub granularity: Option<String>,
    /// Buffer label to priority.
    #[serde(default)]
    pub priorities: BTreeMap<String, i32>,
    /// Buffer label to one priority per chunk.
    #[serde(default)]
    pub chunk_priorities: BTreeMap<String, Vec<i32>>,
}

impl PrioritiesFile {
    /// Reads a priorities file; the error names the file and what is wrong.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = crate::text::read_text(path).map_err(|e| format!("{}: {e}", path.display()))?;
        toml::from_str(&text)
            .map_err(|e| format!("{}: {}", path.display(), crate::text::toml_error(&e)))
    }

    /// The file as TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("priorities serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_toml() {
        let file = PrioritiesFile {
            app: Some("nn".into()),
            size: Some("default".into()),
            granularity: Some("chunk".into()),
            priorities: BTreeMap::from([("locations".into(), 2), ("distances".into(), 1)]),
            chunk_priorities: BTreeMap::from([("locations".into(), vec![2, 2, 1])]),
        };
        let text = file.to_toml();
        assert_eq!(toml::from_str::<PrioritiesFile>(&text).unwrap(), file);
    }

    #[test]
    fn errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("gpuswap-prio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.toml");
        std::fs::write(&path, "[priorities]\nweights = \"high\"\n").unwrap();
        let e = PrioritiesFile::load(&path).unwrap_err();
        assert!(
            e.starts_with(&path.display().to_string()) && e.contains("weights"),
            "{e}"
        );
        assert!(
            PrioritiesFile::load(&dir.join("missing.toml"))
                .unwrap_err()
                .contains("cannot read")
        );
    }
}
