//! The command line of the trainer and evaluator, shared by the `prescient-model`
//! binary and `prescient-dpu model`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::eval::{evaluate, evaluate_tuned, format_table, format_tuned, reference_recall, Mode};
use crate::trace::{read_trace, traces_dir, TraceFormat};
use crate::{Model, ModelConfig, ModelError, Predictor, TuningConfig};

/// The trainer's and evaluator's subcommands (`prescient-model ...`, and
/// `prescient-dpu model ...`).
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Learn a model from a trace and save it.
    Train {
        /// The trace to learn from.
        #[arg(long)]
        trace: PathBuf,
        /// Its format (default: from the file name).
        #[arg(long, value_enum)]
        format: Option<TraceFormat>,
        /// Learn from at most this many writes (the first ones).
        #[arg(long)]
        limit: Option<usize>,
        /// Where to write the model.
        #[arg(long)]
        out: PathBuf,
        /// Model settings.
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Print precision, recall and leases per write of the predictor and its baselines.
    Eval {
        /// Traces to evaluate (default: the shared traces).
        #[arg(long)]
        trace: Vec<PathBuf>,
        /// Thresholds to sweep.
        #[arg(long, value_delimiter = ',', default_values_t = vec![0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 0.95])]
        thetas: Vec<f32>,
        /// Model settings.
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Replay a trace through a saved model (learning on) and print its lease counters.
    Check {
        /// The model file.
        #[arg(long)]
        model: PathBuf,
        /// The trace.
        #[arg(long)]
        trace: PathBuf,
    },
}

/// Model settings shared by the subcommands.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// Memory budget of the model in bytes.
    #[arg(long, default_value_t = ModelConfig::default().memory_bytes)]
    memory_bytes: u64,
    /// Probability a successor needs to be leased.
    #[arg(long, default_value_t = ModelConfig::default().theta)]
    theta: f32,
    /// Lease window in writes.
    #[arg(long, default_value_t = ModelConfig::default().lease_window_writes)]
    window: u32,
    /// A context predicts nothing until it has been followed this often.
    #[arg(long, default_value_t = ModelConfig::default().min_observations)]
    min_observations: u16,
    /// Halve a context's counts when it has been seen this often.
    #[arg(long, default_value_t = ModelConfig::default().count_decay_at)]
    decay_at: u16,
    /// Use only order-1 contexts.
    #[arg(long)]
    order1_only: bool,
}

impl ModelArgs {
    fn config(&self) -> ModelConfig {
        ModelConfig {
            memory_bytes: self.memory_bytes,
            theta: self.theta,
            lease_window_writes: self.window,
            count_decay_at: self.decay_at,
            min_observations: self.min_observations,
            order2: !self.order1_only,
        }
    }
}

fn load(path: &std::path::Path, format: Option<TraceFormat>) -> Result<Vec<u64>, ModelError> {
    read_trace(path, format.unwrap_or_else(|| TraceFormat::from_path(path)))
}

/// Runs one subcommand, printing its results on stdout.
pub fn run(command: Command) -> Result<(), ModelError> {
    match command {
        Command::Train { trace, format, limit, out, model } => {
            let keys = load(&trace, format)?;
            let keys = &keys[..limit.unwrap_or(keys.len()).min(keys.len())];
            let mut m = Model::new(model.config())?;
            for &k in keys {
                m.observe(k);
            }
            m.save(&out)?;
            let bytes = m.to_bytes().len();
            println!(
                "trained on {} writes of {}; wrote {} ({bytes} bytes)",
                keys.len(),
                trace.display(),
                out.display()
            );
        }
        Command::Eval { trace, thetas, model } => {
            let config = model.config();
            config.validate()?;
            let traces = if trace.is_empty() {
                let dir = traces_dir();
                ["cloudPhysicsIO.csv", "OLTP.lis.zst", "P3.lis.zst"].iter().map(|n| dir.join(n)).collect()
            } else {
                trace
            };
            println!(
                "model: memory {} KiB, window {} writes, min observations {}, decay at {}, order 2 {}",
                config.memory_bytes / 1024,
                config.lease_window_writes,
                config.min_observations,
                config.count_decay_at,
                config.order2
            );
            for path in traces {
                let keys = load(&path, None)?;
                let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into());
                let label = format!("{name}: {} writes", keys.len());
                let rows = evaluate(&label, &keys, config, &thetas)?;
                print!("{}", format_table(&rows));
                let at = |mode| {
                    rows.iter().find(|r| r.mode == mode && r.predictor == "model" && r.theta == Some(config.theta))
                };
                for mode in [Mode::Online, Mode::Split] {
                    if let (Some(r), Some(reference)) = (at(mode), reference_recall(&rows, &rows[0].trace, mode)) {
                        println!(
                            "operating point ({mode:?}, theta {}): precision {:.4}, recall {:.4} = {:.2}x the plain reference at 0.9 ({reference:.4})",
                            config.theta,
                            r.stats.precision(),
                            r.stats.recall(),
                            r.stats.recall() / reference
                        );
                    }
                }
                print!("{}", format_tuned(&evaluate_tuned(&label, &keys, config, TuningConfig::default())?));
            }
        }
        Command::Check { model, trace } => {
            let m = Model::load(&model)?;
            let keys = load(&trace, None)?;
            let mut p = Predictor::from_model(m)?;
            for &k in &keys {
                p.on_write(k, |_| {});
            }
            let s = p.stats();
            println!(
                "{} writes: precision {:.4}, recall {:.4}, leases/write {:.4}",
                s.writes,
                s.precision(),
                s.recall(),
                s.leases_per_write()
            );
        }
    }
    Ok(())
}
