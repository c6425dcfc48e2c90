//! Cost per write of the predictor, next to a plain `HashMap` lookup over the same
//! keys measured in the same run (issue 5: observe + predict <= 100 ns per write).
//!
//! Keys: the OLTP trace from the shared traces (`$PRESCIENT_TRACES` overrides where),
//! replayed whole; each figure is the best of several passes.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use prescient_models::trace::{read_trace, shared_traces_dir, TraceFormat};
use prescient_models::{Model, ModelConfig, Predictor};

const PASSES: usize = 5;

fn best_ns_per_key(keys: &[u64], mut pass: impl FnMut() -> u64) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..PASSES {
        let start = Instant::now();
        black_box(pass());
        best = best.min(start.elapsed().as_nanos() as f64 / keys.len() as f64);
    }
    best
}

fn main() {
    let path = shared_traces_dir().join("OLTP.lis.zst");
    let keys = match read_trace(&path, TraceFormat::Lis) {
        Ok(keys) => keys,
        Err(e) => {
            eprintln!("predictor bench: {e}; set PRESCIENT_TRACES to the shared traces folder");
            std::process::exit(1);
        }
    };
    let map: HashMap<u64, u64> = keys.iter().map(|&k| (k, k ^ 1)).collect();
    let hashmap = best_ns_per_key(&keys, || keys.iter().map(|k| map.get(k).copied().unwrap_or(0)).sum());

    let config = ModelConfig::default();
    let mut rows = vec![("HashMap<u64,u64>::get (reference)", hashmap, 0u64)];
    for (name, config) in [
        ("Model observe+predict (order 1+2)", config),
        ("Model observe+predict (order 1)", ModelConfig { order2: false, ..config }),
        ("Model observe+predict, 256 KiB", ModelConfig { memory_bytes: 256 << 10, ..config }),
    ] {
        // Learn on one pass first so that the timed passes see a trained model.
        let mut model = Model::new(config).expect("default config is valid");
        keys.iter().for_each(|&k| model.observe(k));
        let ns = best_ns_per_key(&keys, || {
            let mut n = 0u64;
            for &k in &keys {
                model.observe(k);
                n += model.predict(k).len() as u64;
            }
            n
        });
        rows.push((name, ns, model.memory_bytes()));
    }
    let mut predictor = Predictor::new(config).expect("default config is valid");
    let ns = best_ns_per_key(&keys, || {
        let mut rollbacks = 0u64;
        for &k in &keys {
            predictor.on_write(k, |_| rollbacks += 1);
        }
        rollbacks
    });
    rows.push(("Predictor::on_write (model + leases)", ns, predictor.model().memory_bytes()));

    println!("{} writes of {}, best of {PASSES} passes", keys.len(), path.display());
    println!("{:<38} {:>10} {:>14} {:>11}", "operation", "ns/write", "vs HashMap", "memory KiB");
    for (name, ns, mem) in rows {
        println!("{name:<38} {ns:>10.1} {:>13.2}x {:>11}", ns / hashmap, mem / 1024);
    }
}
