//! The `zarrd` command: thin. Parse the command line, load the
//! configuration, serve.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use zarrd::config::Config;
use zarrd::storage::MountSpec;

mod allocator;

/// zarrd serves Zarr v2 and v3 arrays over HTTP.
///
/// With no arguments, `zarrd serve` serves the directory ./data (created if
/// missing) as mount `data` on http://127.0.0.1:8080 — point zarr-python or
/// TensorStore at http://127.0.0.1:8080/zarr/data/<array>.
#[derive(Parser, Debug)]
#[command(name = "zarrd", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve (the default command).
    ///
    /// Configuration is read from --config (TOML; see
    /// config/zarrd.example.toml), then ZARRD_* environment variables, then
    /// these flags. With no mount configured anywhere, ./data is served as
    /// mount `data`.
    Serve(ServeArgs),
    /// Validate a configuration file (and the ZARRD_* environment), building
    /// every mount and checking it answers; exits non-zero with the reason.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// Print the OpenAPI document (what openapi/openapi.json holds).
    Openapi,
    /// Read a bearer token from stdin and print its SHA-256, the value for
    /// `sha256` in an `[[auth.tokens]]` entry. A trailing newline is not
    /// part of the token. Make tokens random, e.g. `openssl rand -hex 32`.
    HashToken,
}

#[derive(clap::Args, Debug, Default)]
struct ServeArgs {
    /// Configuration file (TOML).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, value_name = "ADDR:PORT")]
    bind: Option<SocketAddr>,
    /// Add or replace a mount: NAME=URL, where URL is a path, file:///abs/path,
    /// memory://, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix.
    /// Repeatable.
    #[arg(long = "mount", value_name = "NAME=URL", value_parser = parse_mount)]
    mounts: Vec<(String, String)>,
}

fn parse_mount(s: &str) -> Result<(String, String), String> {
    let (name, url) = s.split_once('=').ok_or_else(|| format!("`{s}`: expected NAME=URL"))?;
    if name.is_empty() || url.is_empty() {
        return Err(format!("`{s}`: expected NAME=URL with both parts"));
    }
    Ok((name.to_string(), url.to_string()))
}

fn load(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = Config::load(args.config.as_deref(), std::env::vars())?;
    if let Some(bind) = args.bind {
        config.bind = bind;
    }
    for (name, url) in &args.mounts {
        let mut spec = MountSpec::from_url(url);
        // A directory named on the command line is created if missing.
        spec.create = !url.contains("://") || url.starts_with("file://");
        config.mounts.insert(name.clone(), spec);
    }
    config.validate()?;
    Ok(config.with_default_mount())
}

fn main() -> ExitCode {
    allocator::tune();
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Openapi => {
            print!("{}", zarrd::http::openapi::document_json());
            Ok(())
        }
        Command::CheckConfig { file } => check_config(&file),
        Command::HashToken => hash_token(),
        Command::Serve(args) => serve(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zarrd: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    zarrd::service::cpu::init_pool();
    Ok(tokio::runtime::Builder::new_multi_thread().thread_name("zarrd-worker").enable_all().build()?)
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let config = load(args)?;
    zarrd::server::init_logging(config.log.format);
    for name in &config.ignored_env {
        tracing::warn!(variable = %name, "environment variable {name} names no configuration option: ignored");
    }
    runtime()?.block_on(zarrd::server::run(config))
}

/// Tokens shorter than this are refused: a SHA-256 of a short token is
/// quickly found by trying candidates.
const MIN_TOKEN_LEN: usize = 16;

fn hash_token() -> anyhow::Result<()> {
    let mut input = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut input)?;
    let token = input.strip_suffix('\n').map_or(input.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if token.is_empty() {
        anyhow::bail!("no token on stdin (e.g. `openssl rand -hex 32 | tee token.txt | zarrd hash-token`)");
    }
    if token.len() < MIN_TOKEN_LEN || token.chars().any(char::is_whitespace) {
        anyhow::bail!(
            "a token must be at least {MIN_TOKEN_LEN} characters without spaces (e.g. `openssl rand -hex 32`)"
        );
    }
    println!("{}", zarrd::config::TokenHash::of(token.as_bytes()).to_hex());
    Ok(())
}

fn check_config(file: &std::path::Path) -> anyhow::Result<()> {
    let args = ServeArgs { config: Some(file.to_path_buf()), ..ServeArgs::default() };
    let config = load(&args)?;
    for name in &config.ignored_env {
        eprintln!("zarrd: warning: environment variable {name} names no configuration option: ignored");
    }
    runtime()?.block_on(async {
        let app = zarrd::service::App::from_config(config)?;
        if let Some((mount, reason)) = app.probe_mounts().await.first() {
            anyhow::bail!("mount `{mount}` is unreachable: {reason}");
        }
        let names: Vec<&str> = app.mounts().map(|m| m.name()).collect();
        println!("{}: ok ({} mounts: {})", file.display(), names.len(), names.join(", "));
        Ok(())
    })
}

/// mimalloc: `bench/store_get.sh` profiles showed glibc malloc/free at ~15%
/// of the read path (chunk-sized buffers); mimalloc keeps them cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
