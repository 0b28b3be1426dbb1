//! The `vram-lab` command: parse, open a `Session`, run stages, print. Each stage of
//! `experiments::registry()` is a subcommand with its own config flags; `run` runs them all.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use vram_lab::commands;
use vram_lab::error::{LabError, Result};
use vram_lab::experiments::{self, registry};
use vram_lab::memory::host::CountingAlloc;
use vram_lab::model::gguf::recipe::FileType;
use vram_lab::report::html;
use vram_lab::session::run_folder::{RunFolder, RunStatus};
use vram_lab::session::{expected, Session, SessionArgs};
use vram_lab::stage::{AnyStage, Ended, Sizes};

// Heap bytes counted, so CPU runs report allocated / peak exactly and can emulate a card.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

// Request sizes for CUDA OOMs (see memory/alloc_hook.rs).
vram_lab::cuda_alloc_hook!();

#[derive(Parser)]
#[command(name = "vram-lab", version, about = "GPU memory of LLM inference, taken apart byte by byte")]
struct Cli {
    #[command(flatten)]
    args: SessionArgs,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Every stage in order, into one run folder with report.html (the default command). On a GPU:
    /// Qwen2.5-7B (synthetic) on an emulated RTX 4090, as the report; on CPU: the tiny model.
    Run {
        /// Stages to run, in order (default: all)
        #[arg(long, value_delimiter = ',')]
        stages: Option<Vec<String>>,
        /// On a GPU, every experiment at its full size (about 20 minutes and 19 GB written on an
        /// H200); without it the long parts are shortened (about 5 minutes)
        #[arg(long)]
        full: bool,
    },
    /// Re-render report.html of a run folder from its manifest.json
    Report { dir: PathBuf },
    /// Generate text: the quickest check that a model loaded correctly
    Generate(commands::GenerateArgs),
    /// Each precision's logits on this device beside F32's on the CPU, on the same tokens: does this
    /// build compute on this card what the CPU computes?
    Parity(commands::ParityArgs),
    /// Write a GGUF file with llama.cpp's recipe (Q4_K_M by default) from safetensors, a GGUF or a
    /// synthetic preset, with the model's tokenizer in its metadata when it has one
    Quantize {
        /// The .gguf file to write
        #[arg(long)]
        to: PathBuf,
        /// llama-quantize's file type: the same tensor types, so the same bytes, as llama.cpp writes
        #[arg(long = "type", value_enum, default_value_t = FileType::Q4KM)]
        ftype: FileType,
    },
    /// The device, the card presets and the model presets
    Info,
    /// A process's GPU memory over time (NVML), to CSV, with a live line: `vram-lab watch --pid N`
    /// or `vram-lab watch -- python infer.py`
    Watch(commands::WatchArgs),
}

/// Runs `stages` in one session, each with its device's default config and the flags given (if
/// any); a failed stage is an error once the run folder and its report are written.
fn run_stages(
    args: &SessionArgs,
    what: &str,
    stages: Vec<(Box<dyn AnyStage>, Option<&clap::ArgMatches>)>,
    report_card: bool,
    full: bool,
) -> Result<std::path::PathBuf> {
    let mut session = Session::open(args, what, report_card)?;
    // The whole lab on a GPU tells the report's story in minutes unless asked for everything.
    if report_card && !full && session.sizes == Sizes::Report {
        session.sizes = Sizes::Quick;
    }
    let configs = match stage_configs(args, &stages, session.sizes) {
        Ok(c) => c,
        Err(e) => {
            session.abandon();
            return Err(e);
        }
    };
    // What the committed runs on this GPU, model and card took, before anything starts.
    let found = expected::expected(&vram_lab::record::root(), session.manifest(), &configs);
    if let Some(line) = expected::describe(&found, &configs, session.manifest().env.gpu.as_deref()) {
        session.say(line);
    }
    let expected_s: Vec<Option<f64>> = found.iter().map(|e| e.as_ref().map(|e| e.seconds)).collect();
    let bar = session.console.run_bar(stages.len());
    let in_turn: Vec<(&dyn AnyStage, serde_json::Value)> =
        stages.iter().zip(configs).map(|((stage, _), (_, config))| (stage.as_ref(), config)).collect();
    let ended = vram_lab::stage::run_in_turn(&mut session, in_turn, |i| {
        bar.set_position(i as u64);
        bar.set_message(expected::time_left(&expected_s[i..]));
    })?;
    bar.finish_and_clear();
    let interrupted = ended == Ended::Interrupted;
    let on_input = session.failed_on_input;
    let run = session.finish(|run| html::write(run, &registry()))?;
    if interrupted {
        return Err(LabError::Interrupted);
    }
    match run.manifest.status {
        RunStatus::Failed => {
            let failed: Vec<String> = run
                .manifest
                .stages
                .iter()
                .filter_map(|s| s.error.as_ref().map(|e| format!("stage {}: {e}", s.name)))
                .collect();
            Err(if on_input { LabError::Input(failed.join("; ")) } else { LabError::Other(failed.join("; ")) })
        }
        _ => Ok(run.dir),
    }
}

/// Each stage's config for `sizes`: its defaults, the flags given, a notebook's settings.
fn stage_configs(
    args: &SessionArgs,
    stages: &[(Box<dyn AnyStage>, Option<&clap::ArgMatches>)],
    sizes: Sizes,
) -> Result<Vec<(String, serde_json::Value)>> {
    let mut configs = Vec::new();
    for (stage, flags) in stages {
        let mut config = args.apply_compute(match flags {
            Some(m) => stage.config_from(m, sizes)?,
            None => stage.default_config(sizes)?,
        })?;
        // A notebook's Live run names its settings as the config's fields (notebook/live.rs).
        if let Some(settings) = flags.and_then(|m| m.get_one::<String>("settings")) {
            config = vram_lab::stage::with_settings(stage.as_ref(), config, settings)?;
        }
        configs.push((stage.name().to_string(), config));
    }
    Ok(configs)
}

fn dispatch(matches: &clap::ArgMatches) -> Result<()> {
    let cli_err = |e: clap::Error| LabError::input(e.to_string());
    if let Some((name, sub)) = matches.subcommand() {
        if let Some(stage) = experiments::find(name) {
            let mut args = SessionArgs::from_arg_matches(sub).map_err(cli_err)?;
            // `estimate --json`, `plan --json`: the run's answer as one document, nothing else.
            let json = sub.try_get_one::<bool>("json").ok().flatten().copied().unwrap_or(false);
            args.silent |= json;
            args.quiet |= json;
            let dir = run_stages(&args, name, vec![(stage, Some(sub))], false, true)?;
            if json {
                println!("{}", vram_lab::report::json::document(&RunFolder::open(&dir)?, name)?);
            }
            return Ok(());
        }
    }
    let cli = Cli::from_arg_matches(matches).map_err(cli_err)?;
    let args = &cli.args;
    match cli.cmd.unwrap_or(Cmd::Run { stages: None, full: false }) {
        Cmd::Run { stages, full } => {
            let chosen = match stages {
                None => registry(),
                Some(names) => names
                    .iter()
                    .map(|n| {
                        experiments::find(n)
                            .ok_or_else(|| LabError::input(format!("unknown stage `{n}`: use {}", stage_names())))
                    })
                    .collect::<Result<Vec<_>>>()?,
            };
            // Each stage runs once into its own folder of the run.
            if let Some((_, twice)) =
                chosen.iter().enumerate().find(|(i, s)| chosen[..*i].iter().any(|t| t.name() == s.name()))
            {
                return Err(LabError::input(format!("--stages lists {} twice", twice.name())));
            }
            run_stages(args, "run", chosen.into_iter().map(|s| (s, None)).collect(), true, full).map(|_| ())
        }
        Cmd::Report { dir } => {
            let path = html::write(&RunFolder::open(&dir)?, &registry())?;
            println!("wrote {}", path.display());
            Ok(())
        }
        Cmd::Generate(g) => commands::generate(args, &g).map(|t| println!("{t}")),
        Cmd::Parity(p) => commands::parity(args, &p).map(|t| println!("{t}")),
        Cmd::Quantize { to, ftype } => commands::quantize(args, &to, ftype).map(|t| println!("{t}")),
        Cmd::Info => commands::info(args).map(|t| println!("{t}")),
        Cmd::Watch(w) => commands::watch(args, &w).map(|t| println!("{t}")),
    }
}

fn stage_names() -> String {
    registry().iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
}

fn main() {
    // A reader that goes away (`vram-lab info | head -1`) ends the process quietly, as it ends
    // cat or grep: Rust ignores SIGPIPE, and println! then panics on the closed pipe. The lab
    // writes to no child's stdin, and the Hub client's sockets send with MSG_NOSIGNAL.
    // SAFETY: setting a signal's disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    vram_lab::frame::console_setup();
    #[cfg(feature = "cuda")]
    vram_lab::memory::alloc_hook::set_installed();
    vram_lab::session::stop_on_ctrl_c();
    let settings = clap::Arg::new("settings")
        .long("settings")
        .hide(true)
        .help("the stage's config fields as a JSON object (a notebook's Live run)");
    let command = registry().iter().fold(Cli::command(), |c, s| c.subcommand(s.command().arg(settings.clone())));
    let matches = match command.try_get_matches() {
        Ok(m) => m,
        // --help and --version print and exit 0; a bad flag or value is one line and exit 2.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let text = e.to_string();
            eprintln!("{}", text.lines().next().unwrap_or("error: bad arguments"));
            std::process::exit(2);
        }
    };
    let verbose = matches.get_flag("verbose");
    if let Err(e) = dispatch(&matches) {
        if verbose {
            eprintln!("error: {e}\n{e:?}");
        } else {
            eprintln!("error: {e}");
        }
        std::process::exit(match e {
            e if e.is_input() => 2,
            LabError::Interrupted => 130,
            _ => 1,
        });
    }
}
