//! The production prior: how often each production made the best program in each
//! context, counted on a sample of the checkpoint's own chunks, smoothed, with
//! back-off to coarser contexts so every production keeps a non-zero probability.
//! Costs are `-log2 q` bits. The prior steers the search; decoding never needs it.

use super::context::{Context, LEVELS};
use super::production::Production;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const N: usize = Production::ALL.len();

/// Counts of winning productions per (backed-off) context.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prior {
    counts: BTreeMap<Context, [u32; N]>,
}

/// Pseudo-count pulling each level's estimate toward the next coarser level.
const BETA: f64 = 2.0;

impl Prior {
    /// What every production costs under the uniform prior: 4 bits (about
    /// log2 of the number of productions; a learned prior's unseen contexts
    /// cost exactly that).
    pub const UNIFORM_COSTS: [f64; N] = [4.0; N];

    /// No observations: every production costs `UNIFORM_COSTS` everywhere.
    pub fn uniform() -> Prior {
        Prior::default()
    }

    pub fn is_uniform(&self) -> bool {
        self.counts.is_empty()
    }

    /// Records that `p` was chosen at a hole of context `ctx`, at every level.
    pub fn observe(&mut self, ctx: Context, p: Production) {
        for keep in LEVELS {
            self.counts.entry(ctx.backed_off(keep)).or_insert([0; N])[p.index()] += 1;
        }
    }

    /// `-log2 q(p | ctx)` for every production, smoothed from the coarsest level
    /// (starting from uniform) to the finest.
    pub fn costs(&self, ctx: Context) -> [f64; N] {
        let mut q = [1.0 / N as f64; N];
        for keep in LEVELS.iter().rev() {
            if let Some(c) = self.counts.get(&ctx.backed_off(*keep)) {
                let total: u32 = c.iter().sum();
                for (qi, ci) in q.iter_mut().zip(c) {
                    *qi = (*ci as f64 + BETA * *qi) / (total as f64 + BETA);
                }
            }
        }
        q.map(|p| -p.log2())
    }

    /// How often each production was counted over all contexts (the coarsest level).
    pub fn totals(&self) -> BTreeMap<Production, u32> {
        let root = self.counts.keys().find(|c| c.backed_off(0) == **c);
        let counts = root.map(|c| self.counts[c]).unwrap_or([0; N]);
        Production::ALL
            .into_iter()
            .zip(counts)
            .filter(|(_, c)| *c > 0)
            .collect()
    }

    pub fn to_json(&self) -> Value {
        let entries: Vec<Value> = self
            .counts
            .iter()
            .map(|(ctx, counts)| {
                let named: BTreeMap<&str, u32> = Production::ALL
                    .iter()
                    .zip(counts)
                    .filter(|(_, c)| **c > 0)
                    .map(|(p, c)| (p.name(), *c))
                    .collect();
                json!({"context": ctx.0.to_vec(), "counts": named})
            })
            .collect();
        json!({"brevis_prior": 1, "entries": entries})
    }

    /// Reads a prior written by `to_json`; any malformed entry is an error.
    pub fn from_json(v: &Value) -> Result<Prior, String> {
        if v["brevis_prior"] != 1 {
            return Err("not a brevis prior (missing \"brevis_prior\": 1)".into());
        }
        let entries = v["entries"].as_array().ok_or("missing entries")?;
        let mut prior = Prior::default();
        for e in entries {
            let ctx = e["context"]
                .as_array()
                .filter(|a| a.len() == super::context::FIELDS)
                .ok_or("bad context")?;
            let mut key = [0u8; super::context::FIELDS];
            for (k, x) in key.iter_mut().zip(ctx) {
                *k = x
                    .as_u64()
                    .and_then(|x| u8::try_from(x).ok())
                    .ok_or("bad context field")?;
            }
            let mut counts = [0u32; N];
            for (name, c) in e["counts"].as_object().ok_or("bad counts")? {
                let p = Production::from_name(name)
                    .ok_or_else(|| format!("unknown production {name}"))?;
                counts[p.index()] = c
                    .as_u64()
                    .and_then(|c| u32::try_from(c).ok())
                    .ok_or("bad count")?;
            }
            prior.counts.insert(Context(key), counts);
        }
        Ok(prior)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(a: u8) -> Context {
        Context([a, 1, 2, 3, 4, 0, 0, 1, 1, 1])
    }

    #[test]
    fn observed_productions_get_cheaper_and_none_becomes_impossible() {
        let mut prior = Prior::uniform();
        let uniform = (N as f64).log2();
        assert!(prior
            .costs(ctx(0))
            .iter()
            .all(|c| (c - uniform).abs() < 1e-9));
        for _ in 0..50 {
            prior.observe(ctx(0), Production::MergeFloat);
        }
        let seen = prior.costs(ctx(0));
        assert!(seen[Production::MergeFloat.index()] < 0.2);
        assert!(seen.iter().all(|c| c.is_finite()));
        // An unseen context backs off to the coarser levels that saw the same data.
        let other = prior.costs(ctx(1));
        assert!(other[Production::MergeFloat.index()] < 1.0);
        assert!(other[Production::Lit.index()] > other[Production::MergeFloat.index()]);
    }

    #[test]
    fn json_round_trips_and_rejects_garbage() {
        let mut prior = Prior::uniform();
        prior.observe(ctx(3), Production::ScanAdd);
        prior.observe(ctx(3), Production::Lit);
        let back = Prior::from_json(&prior.to_json()).unwrap();
        assert_eq!(back, prior);
        assert!(Prior::from_json(&json!({"x": 1})).is_err());
        let mut bad = prior.to_json();
        bad["entries"][0]["counts"] = json!({"nonsense": 1});
        assert!(Prior::from_json(&bad).is_err());
    }
}
