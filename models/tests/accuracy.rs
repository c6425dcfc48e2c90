//! Accuracy regression on small slices of the shipped traces: the model at its
//! default operating point must stay precise and must keep its recall lead over the
//! plain order-1 reference at theta 0.9, measured in the same run. Also checks that
//! the shipped models load and predict.
//!
//! The traces are found at `$PRESCIENT_TRACES` or `traces/` in this
//! crate; if they are missing the tests fail and say where they looked.

use std::path::{Path, PathBuf};

use prescient_models::eval::{replay, Mode, ModelForecaster, PlainOrder1};
use prescient_models::trace::{read_trace, traces_dir, TraceFormat};
use prescient_models::{LeaseStats, Model, ModelConfig, Predictor};

fn trace(name: &str, writes: usize) -> Vec<u64> {
    let path = traces_dir().join(name);
    let keys = read_trace(&path, TraceFormat::from_path(&path)).unwrap_or_else(|e| {
        panic!("the accuracy tests need the shared traces: {e}. The repository ships them in models/traces/; PRESCIENT_TRACES overrides where")
    });
    assert!(keys.len() >= writes, "{name}: {} writes, the test needs {writes}", keys.len());
    keys[..writes].to_vec()
}

fn compare(keys: &[u64], mode: Mode) -> (LeaseStats, LeaseStats) {
    let config = ModelConfig::default();
    let model = replay(keys, &mut ModelForecaster::new(config).unwrap(), config.lease_window_writes, mode).unwrap();
    let reference = replay(keys, &mut PlainOrder1::new(0.9), config.lease_window_writes, mode).unwrap();
    (model, reference)
}

fn check(name: &str, writes: usize, precision_min: f64, recall_ratio_min: f64) {
    let keys = trace(name, writes);
    for mode in [Mode::Online, Mode::Split] {
        let (model, reference) = compare(&keys, mode);
        let ratio = model.recall() / reference.recall();
        eprintln!(
            "{name} first {writes} writes {mode:?}: model precision {:.4} recall {:.4}, reference recall {:.4}, ratio {ratio:.2}",
            model.precision(),
            model.recall(),
            reference.recall()
        );
        assert!(model.precision() >= precision_min, "{name} {mode:?}: precision {:.4}", model.precision());
        assert!(ratio >= recall_ratio_min, "{name} {mode:?}: recall {ratio:.2}x the reference");
    }
}

#[test]
fn cloud_physics_slice_keeps_precision_and_recall_lead() {
    check("cloudPhysicsIO.csv", 30_000, 0.95, 1.4);
}

#[test]
fn oltp_slice_keeps_precision_and_recall() {
    check("OLTP.lis.zst", 200_000, 0.95, 1.0);
}

fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("shipped")
}

#[test]
fn shipped_models_load_and_predict() {
    for (file, trace_name) in [("cloudPhysicsIO.model", "cloudPhysicsIO.csv"), ("OLTP.model", "OLTP.lis.zst")] {
        let path = shipped().join(file);
        let model = Model::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20, "{file} must stay under 1 MiB");
        assert_eq!(
            *model.config(),
            ModelConfig { memory_bytes: model.config().memory_bytes, ..ModelConfig::default() }
        );
        let mut p = Predictor::from_model(model).unwrap();
        for &k in &trace(trace_name, 20_000) {
            p.on_write(k, |_| {});
        }
        let s = p.stats();
        assert!(s.precision() >= 0.9 && s.recall() > 0.05, "{file}: {s:?}");
    }
}
