//! Sharded sweeps: which grid points shard `I/N` of a sweep runs.
//!
//! Points are dealt round-robin over every axis at once: a point whose value on each
//! axis has index `c_1, c_2, ...` belongs to shard `(c_1 + c_2 + ...) mod N + 1`. Along
//! any one axis, neighbouring values land on different shards, and each shard holds
//! about `1/N` of every value of every axis, so whichever axis makes points slow (a mode,
//! a VRAM size, an app), the shards carry about the same work. Dealing by the point's
//! index alone (`p mod N`) followed only the fastest-varying axis: with two shards and a
//! last axis of two chunk policies, one shard got every run of the slow policy (94 % of
//! the benchmark sweep's work). The deal depends on the plan alone, so every machine
//! that reads the same plan agrees on it.

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

    /// The shard of `count` shards that holds `point` of a grid with axes of `sizes`
    /// values (the last axis varies fastest, as [`super::plan::grid`] lists points).
    pub fn of(point: usize, count: usize, sizes: &[usize]) -> Self {
        let mut rest = point;
        let mut sum = 0;
        for &size in sizes.iter().rev() {
            sum += rest % size.max(1);
            rest /= size.max(1);
        }
        Self {
            index: sum % count + 1,
            count,
        }
    }

    /// How many shards the sweep is split into.
    pub fn count(self) -> usize {
        self.count
    }

    /// The indices of the points this shard runs out of a grid with axes of `sizes`
    /// values, ascending.
    pub fn points(self, sizes: &[usize]) -> Vec<usize> {
        let total: usize = sizes.iter().product();
        (0..total)
            .filter(|&p| Self::of(p, self.count, sizes) == self)
            .collect()
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

    use proptest::prelude::*;

    proptest! {
        /// Whatever the grid (no axis, empty axes, many), every point is in exactly one
        /// shard, and each shard lists its points ascending.
        #[test]
        fn the_shards_hold_every_point_exactly_once(
            sizes in proptest::collection::vec(0usize..7, 0..4),
            count in 1usize..17,
        ) {
            let total: usize = sizes.iter().product();
            let mut held = vec![0; total];
            for index in 1..=count {
                let shard = Shard { index, count };
                let points = shard.points(&sizes);
                prop_assert!(points.windows(2).all(|w| w[0] < w[1]), "{}: ascending", shard);
                for p in points {
                    held[p] += 1;
                    prop_assert_eq!(Shard::of(p, count, &sizes), shard);
                }
            }
            prop_assert!(held.iter().all(|&n| n == 1), "{:?} in {} shards: {:?}", sizes, count, held);
        }

        /// Each shard holds about 1/N of every value of every axis: within one point of
        /// an equal split, for any axis, so a slow value is spread over every shard.
        #[test]
        fn every_value_of_every_axis_is_spread_over_the_shards(
            sizes in proptest::collection::vec(1usize..9, 1..4),
            count in 1usize..5,
        ) {
            for axis in 0..sizes.len() {
                let others: usize = sizes.iter().enumerate()
                    .filter(|(a, _)| *a != axis).map(|(_, s)| s).product();
                for index in 1..=count {
                    let shard = Shard { index, count };
                    for value in 0..sizes[axis] {
                        let stride: usize = sizes[axis + 1..].iter().product();
                        let held = shard.points(&sizes).iter()
                            .filter(|&&p| p / stride % sizes[axis] == value).count();
                        prop_assert!(held.abs_diff(others / count) <= others.div_ceil(count) - others / count + 1,
                            "{:?}, {}: axis {} value {}: {} of {}", sizes, shard, axis, value, held, others);
                    }
                }
            }
        }
    }

    #[test]
    fn one_axis_deals_round_robin_and_two_axes_like_a_chequerboard() {
        assert_eq!(Shard::WHOLE.points(&[3]), [0, 1, 2]);
        assert_eq!("2/3".parse::<Shard>().unwrap().points(&[8]), [1, 4, 7]);
        assert!("5/16".parse::<Shard>().unwrap().points(&[4]).is_empty());
        // 2 x 2 in two shards: the diagonal, not the first column.
        assert_eq!("1/2".parse::<Shard>().unwrap().points(&[2, 2]), [0, 3]);
        // The benchmark sweep's shape: 8 apps x 25 sizes x 2 policies. The slow policy's
        // 200 points split 100 and 100 (p mod 2 gave one shard all 200).
        let sizes = [8, 25, 2];
        for shard in ["1/2", "2/2"] {
            let held = shard.parse::<Shard>().unwrap().points(&sizes);
            assert_eq!(held.iter().filter(|&&p| p % 2 == 1).count(), 100, "{shard}");
        }
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
