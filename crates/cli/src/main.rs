//! `ferry`: the GridFTP server and tools. This binary only parses arguments and presents
//! results; the work lives in the library crates.

mod demo;
mod serve;

use clap::{Parser, Subcommand};

/// ferry: a GridFTP server and client suite, wire-compatible with the Globus tools.
#[derive(Debug, Parser)]
#[command(name = "ferry", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the GridFTP server.
    Serve(serve::ServeArgs),
    /// Add or change a user in a password file (argon2id hashes).
    Passwd(serve::PasswdArgs),
    /// Start a server on a temporary directory, copy a generated file through it with parallel
    /// streams both ways, verify checksums and print the throughput.
    Demo(demo::DemoArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Serve(a) => serve::run(a),
        Cmd::Passwd(a) => serve::passwd(a),
        Cmd::Demo(a) => demo::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferry: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
