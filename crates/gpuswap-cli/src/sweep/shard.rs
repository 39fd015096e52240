//! Sharded sweeps: which grid points shard `I/N` of a sweep runs.
//!
//! Points are dealt round-robin: point `p` belongs to shard `p mod N + 1`. The deal
//! depends on the point's index alone, so every machine that reads the same plan agrees
//! on it; and neighbouring points, which often cost about the same (one VRAM size and the
//! next), land on different shards, so the shards finish at about the same time where
//! contiguous blocks would give one shard all the slow points.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Shard `index` of `count` (1-based, as job arrays number their tasks); written `I/N`,
/// in shard.toml too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Shard {
    index: usize,
    count: usize,
}

impl Shard {
    /// The whole sweep: one shard holding every point.
    pub const WHOLE: Self = Self { index: 1, count: 1 };

    /// The shard of `count` shards that holds `point`.
    pub fn of(point: usize, count: usize) -> Self {
        Self {
            index: point % count + 1,
            count,
        }
    }

    /// How many shards the sweep is split into.
    pub fn count(self) -> usize {
        self.count
    }

    /// The indices of the points this shard runs out of a grid of `total`, ascending.
    pub fn points(self, total: usize) -> Vec<usize> {
        (self.index - 1..total).step_by(self.count).collect()
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl From<Shard> for String {
    fn from(shard: Shard) -> Self {
        shard.to_string()
    }
}

impl TryFrom<String> for Shard {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl FromStr for Shard {
    type Err = String;

    /// Reads `I/N`; the error says what was expected (clap adds the flag's name).
    fn from_str(text: &str) -> Result<Self, String> {
        let expected =
            "expected I/N, shard I of N shards, whole numbers with 1 <= I <= N (e.g. 3/16)";
        let (index, count) = text.split_once('/').ok_or(expected)?;
        let number = |t: &str| t.trim().parse::<usize>().map_err(|_| expected.to_owned());
        let (index, count) = (number(index)?, number(count)?);
        if index == 0 || index > count {
            return Err(format!("shard {index} of {count}: {expected}"));
        }
        Ok(Self { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_hold_every_point_exactly_once() {
        // Grids smaller than, equal to and larger than the number of shards.
        for total in (0..=40).chain([100, 257]) {
            for count in 1..=17 {
                let mut held = vec![0; total];
                for index in 1..=count {
                    let shard = Shard { index, count };
                    let points = shard.points(total);
                    assert!(points.windows(2).all(|w| w[0] < w[1]), "{shard}: ascending");
                    for p in points {
                        held[p] += 1;
                        assert_eq!(Shard::of(p, count), shard);
                    }
                }
                assert!(
                    held.iter().all(|&n| n == 1),
                    "{total} points in {count} shards: {held:?}"
                );
            }
        }
        assert_eq!(Shard::WHOLE.points(3), [0, 1, 2]);
        assert_eq!("2/3".parse::<Shard>().unwrap().points(8), [1, 4, 7]);
        assert!("5/16".parse::<Shard>().unwrap().points(4).is_empty());
    }

    #[test]
    fn shards_read_i_of_n_and_refuse_the_rest() {
        let shard: Shard = "3/16".parse().unwrap();
        assert_eq!(
            shard,
            Shard {
                index: 3,
                count: 16
            }
        );
        assert_eq!(shard.to_string(), "3/16");
        assert_eq!("1/1".parse(), Ok(Shard::WHOLE));
        for bad in [
            "0/16", "17/16", "1/0", "0/0", "3", "3/", "/16", "a/b", "-1/4", "3/16/2",
        ] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.contains("expected I/N"), "{bad}: {e}");
        }
        assert!(
            "17/16"
                .parse::<Shard>()
                .unwrap_err()
                .starts_with("shard 17 of 16")
        );
    }
}
