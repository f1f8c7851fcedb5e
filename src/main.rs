//! The `tinyhub` binary: parse the command line, set up logging, run the hub (or, for
//! `tinyhub cache …`, the cache tool).

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: tinyhub::alloc::Counting = tinyhub::alloc::Counting;

fn main() -> ExitCode {
    tinyhub::alloc::few_arenas();
    let config = match tinyhub::config::from_args(std::env::args_os().skip(1)) {
        Ok(tinyhub::config::Command::Run(config)) => config,
        Ok(tinyhub::config::Command::Cache(args)) => return tinyhub::cachectl::run(args),
        Ok(tinyhub::config::Command::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tinyhub: {e}");
            return ExitCode::from(2);
        }
    };
    tinyhub::logging::init(&config.log);
    match tinyhub::app::run(*config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::from(e.exit_status())
        }
    }
}
