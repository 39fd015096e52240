//! Scenario key paths (`device.vram_limit`, `tenant[1].start`, `manager`, `a+b`): where
//! one points, whether two set the same setting, and setting one at a grid point.

use toml::Value;

/// Turns a value written as text into a TOML value: one written as TOML (a whole
/// table `{ mode = "gdev" }`, a list `[...]`, a quoted string) is read as such; bare
/// text takes the type the scenario uses at `path` (or an integer for `seed`, `repeat`
/// and `count`, a number for `oversubscription`, `subscription`, `trace_bandwidth` and
/// `link_scale`, a string otherwise).
pub(super) fn typed(text: String, path: &str, scenario: &toml::Table) -> Result<Value, String> {
    if text.starts_with(['{', '[', '"', '\'']) {
        // A value alone is no TOML document: it is read as the value of a key.
        return format!("value = {text}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("value"))
            .ok_or_else(|| {
                format!(
                    "{text}: expected a TOML value, such as {{ mode = \"gdev\", chunk_size = \"1MiB\" }}, [\"a\", \"b\"] or \"text\""
                )
            });
    }
    Ok(bare(text, path, scenario))
}

fn bare(text: String, path: &str, scenario: &toml::Table) -> Value {
    let existing = lookup(scenario, path);
    let wants_integer = match existing {
        Some(Value::Integer(_)) => true,
        Some(_) => false,
        None => path == "seed" || path.ends_with(".repeat") || path.ends_with(".count"),
    };
    let wants_float = match existing {
        Some(Value::Float(_)) => true,
        Some(_) => false,
        None => [
            ".oversubscription",
            ".subscription",
            ".trace_bandwidth",
            ".link_scale",
        ]
        .iter()
        .any(|k| path.ends_with(k)),
    };
    match (text.parse::<i64>(), text.parse::<f64>()) {
        (Ok(n), _) if wants_integer => Value::Integer(n),
        (_, Ok(x)) if wants_float => Value::Float(x),
        _ => Value::String(text),
    }
}

fn lookup<'a>(scenario: &'a toml::Table, path: &str) -> Option<&'a Value> {
    // A joint key ("a+b") takes the type of its first part.
    let t = target(path.split('+').next()?).ok()?;
    let table = match (t.section, t.tenant) {
        (None, _) => scenario,
        (Some(s), None) => scenario.get(s)?.as_table()?,
        (Some(s), Some(i)) => scenario.get(s)?.as_array()?.get(i)?.as_table()?,
    };
    table.get(t.key)
}

/// The sections that are arrays of tables: the tenants, or the VMs of a scenario for a
/// virtualised GPU.
const ARRAY_SECTIONS: [&str; 2] = ["tenant", "vm"];

/// Where a key path points: a table (none for top-level keys), for `tenant[i]` (or
/// `vm[i]`) one entry (`tenant.x` means every tenant), and the key in it.
struct Target<'a> {
    section: Option<&'a str>,
    tenant: Option<usize>,
    key: &'a str,
}

fn target(path: &str) -> Result<Target<'_>, String> {
    let expected = "expected a scenario key such as seed, device.vram_limit, manager.chunk_policy, manager (a table), scheduler.policy, tenant.repeat, tenant[1].start, tenant (a list of tenant tables) or vm[0].count";
    let (section, key) = match path.split_once('.') {
        // Top-level keys: the seed, a whole table (its entries replace the scenario's), or
        // the whole list of tenants (a co-running pair per value, say).
        None if ["seed", "device", "manager", "scheduler", "tenant"].contains(&path) => {
            return Ok(Target {
                section: None,
                tenant: None,
                key: path,
            });
        }
        None => return Err(expected.into()),
        Some((_, key)) if key.contains('.') || key.is_empty() => {
            return Err(format!("{path}: {expected}"));
        }
        Some(split) => split,
    };
    match section {
        "device" | "manager" | "scheduler" | "tenant" | "vm" => Ok(Target {
            section: Some(section),
            tenant: None,
            key,
        }),
        _ => ARRAY_SECTIONS
            .iter()
            .find_map(|array| {
                let index = section
                    .strip_prefix(array)?
                    .strip_prefix('[')?
                    .strip_suffix(']')?
                    .parse::<usize>()
                    .ok()?;
                Some(Target {
                    section: Some(array),
                    tenant: Some(index),
                    key,
                })
            })
            .ok_or_else(|| expected.to_owned()),
    }
}

/// Whether two key paths can set the same scenario value: equal parts, or a whole table
/// and a key inside it (`manager` and `manager.chunk_policy`), or every tenant and one.
pub(super) fn overlaps(a: &str, b: &str) -> bool {
    let section = |k: &str| {
        k.split('.')
            .next()
            .unwrap_or(k)
            .split('[')
            .next()
            .unwrap_or(k)
            .to_owned()
    };
    let field = |k: &str| k.split_once('.').map(|(_, f)| f.to_owned());
    a.split('+').any(|x| {
        b.split('+').any(|y| {
            section(x) == section(y)
                && match (field(x), field(y)) {
                    (Some(f), Some(g)) => {
                        f == g && (x == y || !x.contains('[') || !y.contains('['))
                    }
                    _ => true,
                }
        })
    })
}

/// Checks a key path; `a+b` joins keys that take the same value at every point (say the
/// app of two of three tenants).
pub(super) fn check_path(path: &str, scenario: &toml::Table) -> Result<(), String> {
    for part in path.split('+') {
        // results.csv has a seed column per run already; a varied seed would make two.
        if part == "seed" {
            return Err(
                "each run's seed is the scenario's seed plus the run's number; expected [sweep] runs = N (or --runs N) to run more seeds".into(),
            );
        }
        let t = target(part)?;
        if let Some(section) = t.section {
            crate::scenario::check_key(section, t.key)?;
        }
        if let (Some(i), Some(section)) = (t.tenant, t.section) {
            let count = scenario
                .get(section)
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if i >= count {
                let what = if section == "vm" { "VMs" } else { "tenants" };
                return Err(format!(
                    "the scenario has {count} {what}; expected an index below {count}"
                ));
            }
        }
    }
    Ok(())
}

/// Sets `path` (each part of a joint key) to `value` in a scenario table.
pub(super) fn apply(scenario: &mut toml::Table, path: &str, value: &Value) {
    for part in path.split('+') {
        apply_one(scenario, part, value);
    }
}

/// Whether a `[manager]` setting means the same in every mode (the chunk size, the
/// return interval, the GPU-time keys); the others are a mode's own parameters.
pub fn is_every_modes_setting(key: &str) -> bool {
    ["chunk_size", "return_interval"].contains(&key) || crate::gpu_time_keys::KEYS.contains(&key)
}

fn apply_one(scenario: &mut toml::Table, path: &str, value: &Value) {
    let t = target(path).expect("checked when read");
    match t.section {
        None => match (scenario.get_mut(t.key), value) {
            (Some(Value::Table(existing)), Value::Table(entries)) => {
                // A manager of another mode keeps only the settings every mode takes:
                // the scenario's own mode's parameters would not be the new mode's.
                if t.key == "manager"
                    && entries
                        .get("mode")
                        .is_some_and(|m| existing.get("mode") != Some(m))
                {
                    existing.retain(|k, _| is_every_modes_setting(k));
                }
                existing.extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                scenario.insert(t.key.to_owned(), value.clone());
            }
        },
        Some(array) if ARRAY_SECTIONS.contains(&array) => {
            if let Some(Value::Array(tenants)) = scenario.get_mut(array) {
                for (i, tenant) in tenants.iter_mut().enumerate() {
                    if t.tenant.is_none_or(|want| want == i)
                        && let Some(table) = tenant.as_table_mut()
                    {
                        table.insert(t.key.to_owned(), value.clone());
                    }
                }
            }
        }
        Some(section) => {
            let entry = scenario
                .entry(section.to_owned())
                .or_insert_with(|| Value::Table(toml::Table::new()));
            if let Some(table) = entry.as_table_mut() {
                table.insert(t.key.to_owned(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_shares_vary_as_numbers_even_when_the_scenario_leaves_them_out() {
        let s: toml::Table = toml::from_str("[[tenant]]\ntrace = \"t.pickle\"\n").unwrap();
        // `device.link_scale` was once varied as text and refused with a type error.
        for path in [
            "tenant[0].trace_bandwidth",
            "device.subscription",
            "device.link_scale",
        ] {
            assert_eq!(
                typed("0.25".into(), path, &s),
                Ok(Value::Float(0.25)),
                "{path}"
            );
        }
        assert_eq!(
            typed("x".into(), "tenant[0].name", &s),
            Ok(Value::String("x".into()))
        );
    }

    #[test]
    fn overlapping_keys_are_detected() {
        assert!(overlaps("manager", "manager.chunk_policy"));
        assert!(overlaps("tenant.app", "tenant[1].app"));
        assert!(overlaps("tenant[0].app+tenant[1].app", "tenant[1].app"));
        assert!(overlaps("seed", "seed"));
        assert!(!overlaps("tenant[0].app", "tenant[1].app"));
        assert!(!overlaps("manager.mode", "manager.chunk_policy"));
        assert!(!overlaps("device.vram_limit", "manager.chunk_size"));
        assert!(!overlaps("tenant.app", "tenant.repeat"));
    }

    fn tenants_have(s: &toml::Table, key: &str, value: &str) -> bool {
        s["tenant"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t[key].as_str() == Some(value))
    }

    #[test]
    fn a_manager_of_another_mode_drops_the_scenarios_mode_parameters() {
        let base: toml::Table = "[manager]\nmode = \"gpuswap\"\nchunk_policy = \"priority-buffer\"\nchunk_size = \"4MiB\"\n"
            .parse()
            .unwrap();
        let table = |text: &str| Value::Table(text.parse().unwrap());
        let mut s = base.clone();
        apply(&mut s, "manager", &table("mode = \"native\""));
        assert_eq!(
            s["manager"].as_table().unwrap(),
            &"mode = \"native\"\nchunk_size = \"4MiB\"\n"
                .parse::<toml::Table>()
                .unwrap()
        );
        // The same mode keeps its parameters unless the value sets them.
        let mut s = base.clone();
        apply(
            &mut s,
            "manager",
            &table("mode = \"gpuswap\"\nvictim = \"performance\""),
        );
        assert_eq!(
            s["manager"]["chunk_policy"].as_str(),
            Some("priority-buffer")
        );
        assert_eq!(s["manager"]["victim"].as_str(), Some("performance"));
    }

    #[test]
    fn apply_sets_every_tenant_or_one() {
        let mut s: toml::Table = ("[[tenant]]\napp = \"nn\"\n[[tenant]]\napp = \"bfs\"\n")
            .parse()
            .unwrap();
        apply(&mut s, "tenant.repeat", &Value::Integer(5));
        apply(&mut s, "tenant[1].start", &Value::String("1s".into()));
        apply(&mut s, "device.vram_limit", &Value::String("20MiB".into()));
        apply(
            &mut s,
            "tenant[0].size+tenant[1].size",
            &Value::String("rodinia".into()),
        );
        assert!(
            check_path("tenant[0].size+tenant[7].size", &s)
                .unwrap_err()
                .contains("2 tenants")
        );
        assert!(check_path("seed", &s).unwrap_err().contains("runs = N"));
        let tenants = s["tenant"].as_array().unwrap();
        assert_eq!(tenants[0]["repeat"].as_integer(), Some(5));
        assert_eq!(tenants[1]["repeat"].as_integer(), Some(5));
        assert!(tenants[0].get("start").is_none());
        assert_eq!(tenants[1]["start"].as_str(), Some("1s"));
        assert_eq!(s["device"]["vram_limit"].as_str(), Some("20MiB"));
        assert!(tenants_have(&s, "size", "rodinia"));
    }
}
