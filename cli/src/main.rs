//! `framewire`: look at Dask wire captures, talk to and relay Dask
//! servers, and demonstrate the transport.
//!
//! Every error is one line on stderr and exit status 1.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use framewire::serialize::{IterateCollection, SerializeOptions, DEFAULT_SHARD_SIZE};

mod args;
mod call;
mod client;
mod dataset;
mod demo;
mod encode;
mod input;
mod inspect;
mod json;
mod output;
mod roundtrip;
mod swarm;
mod tap;
mod tls;

/// mimalloc: the swarm's thousands of small messages a second allocate
/// and free short-lived buffers, which glibc's malloc serves slower.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "framewire",
    version,
    about = "Dask distributed's wire protocol: inspect captures, call and relay Dask servers, scatter and gather data"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show each message of a capture (one direction of a Dask TCP stream):
    /// frames, frame 0 and its blocks. Messages are numbered from 0.
    Inspect {
        /// One JSON object per message, one per line.
        #[arg(long)]
        json: bool,
        /// Also show the message with every block deserialized (`value`).
        #[arg(long)]
        deserialize: bool,
        /// Capture files; `-` reads stdin.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
    },
    /// Decode each message, encode it again, and compare frames and wire
    /// bytes. Exit status 0 only if every message is identical.
    Roundtrip {
        /// Capture file; `-` reads stdin.
        #[arg(value_name = "FILE")]
        file: String,
    },
    /// Build one message from JSON (the conventions of `inspect --json`, plus
    /// `{"$serialize": v}` and `{"$ndarray": {"dtype", "shape", "data"}}`)
    /// and write it to stdout, enveloped as on a Dask TCP stream.
    Encode {
        /// How collections inside `$serialize` are serialized.
        #[arg(long, value_enum, default_value_t = Iterate::Auto)]
        iterate: Iterate,
        /// Payload frames longer than this are cut into shards.
        #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_SHARD_SIZE as u64,
              value_parser = clap::value_parser!(u64).range(1..))]
        shard_size: u64,
        /// What the prelude's first-read length `N` covers.
        #[arg(long, value_enum, default_value_t = encode::FirstRead::All)]
        first_read: encode::FirstRead,
        /// The message as JSON; `-` reads it from stdin.
        #[arg(value_name = "JSON")]
        json: String,
    },
    /// Send one RPC message (JSON as for `encode`) to a Dask server, after
    /// the handshake, and print its reply as one JSON line (blocks
    /// deserialized as by `inspect --deserialize`). `"reply": true` is added
    /// as Dask's rpc does. An error reply (`"status": "error"` or
    /// `"uncaught-error"`) exits with status 1.
    Call {
        /// Give up after this many seconds (connecting, handshake, reply).
        #[arg(long, value_name = "SECONDS", default_value = "30",
              value_parser = args::parse_timeout)]
        timeout: std::time::Duration,
        #[command(flatten)]
        connect: args::ConnectArgs,
        /// Offer this codec in the handshake (lz4, zstd, snappy, zlib); if
        /// the server offers the same, payloads are compressed under Dask's
        /// policy. A Python Dask server answers nil to a client on its own
        /// host, so nothing is compressed then (as between two Dask
        /// processes). Compressed replies are decoded whatever is agreed.
        #[arg(long, value_name = "CODEC")]
        compression: Option<String>,
        /// Offer CRC32 checksum trailers (agreed only with a framewire
        /// peer); `require`: fail unless the server offers them too (a
        /// Python Dask server never does).
        #[arg(long, value_enum, value_name = "MODE")]
        checksums: Option<call::ChecksumMode>,
        /// The server: `tcp://HOST:PORT`, `tls://HOST:PORT` (with the
        /// `--tls-*` files) or `HOST:PORT`.
        #[arg(value_name = "ADDRESS")]
        address: String,
        /// The message as JSON, e.g. '{"op": "identity"}'; `-` reads stdin.
        #[arg(value_name = "JSON")]
        json: String,
    },
    /// Relay Dask connections to an upstream server, message by message and
    /// unchanged (nothing deserialized; each message forwarded as it
    /// arrives, large ones spliced on Linux without entering the tap's
    /// memory), logging one line per message: time, connection, direction,
    /// ops, frames, bytes; and one per connection open and close.
    /// Compressed frames are forwarded as they are (the tap never decodes
    /// payloads, so it has no codec option). Either side may be tls://:
    /// the tap ends TLS on that side with the --tls-* files (one set for
    /// both sides; --upstream-tls-* for other files upstream), and relays
    /// such connections by copying (never spliced).
    Tap {
        /// Where to listen: `HOST:PORT` or `tcp://HOST:PORT`, or
        /// `tls://HOST:PORT` (with --tls-*; clients must present a
        /// certificate signed by the CA, as to a Dask server); port 0 picks
        /// one, printed on stderr.
        #[arg(long, value_name = "ADDRESS")]
        listen: String,
        /// The server to relay to: `HOST:PORT`, `tcp://HOST:PORT` or
        /// `tls://HOST:PORT` (with --upstream-tls-* or --tls-*).
        #[arg(long, value_name = "ADDRESS")]
        upstream: String,
        #[command(flatten)]
        tls: tls::TlsArgs,
        #[command(flatten)]
        upstream_tls: tls::UpstreamTlsArgs,
        /// Deadline of a client's TLS handshake; past it the connection is
        /// refused (one log line) and the tap carries on.
        #[arg(long, value_name = "SECONDS", default_value = "30",
              value_parser = args::parse_timeout)]
        handshake_timeout: std::time::Duration,
        #[command(flatten)]
        timeouts: args::Timeouts,
        /// Write the log here instead of stdout.
        #[arg(long, value_name = "FILE")]
        log: Option<String>,
        /// Verify checksum trailers in transit on connections whose two
        /// peers agreed on them in their (relayed) handshakes: a bad
        /// trailer is an error that closes the connection. Without it,
        /// trailers are relayed as ordinary frames.
        #[arg(long)]
        checksums: bool,
        /// Copy every byte through the tap's memory instead of moving large
        /// messages with splice(2) (for comparison; splice is Linux only).
        #[arg(long)]
        no_splice: bool,
    },
    /// Put a value on a Dask cluster's workers under KEY, as
    /// `Client.scatter` does, print `scattered KEY to WORKER` once the
    /// scheduler knows, and keep the key alive until this command exits
    /// (--hold SECONDS, or until interrupted); a Python client takes it with
    /// `Future(KEY, client=c, state="memory")` meanwhile.
    Scatter {
        /// FILE is any bytes, sent as Python `bytes`.
        #[arg(long, conflicts_with = "json")]
        bytes: bool,
        /// FILE is JSON (the conventions of `encode`), sent as a plain
        /// value (ints, floats, strs, dicts; lists arrive as tuples).
        #[arg(long)]
        json: bool,
        /// Exit (releasing the key) after this many seconds instead of
        /// when interrupted (SIGINT or SIGTERM).
        #[arg(long, value_name = "SECONDS", value_parser = args::parse_timeout)]
        hold: Option<std::time::Duration>,
        /// Exit at once and leave the key in the cluster (Dask's
        /// `fire_and_forget`: no client closing releases it).
        #[arg(long, conflicts_with = "hold")]
        fire_and_forget: bool,
        #[command(flatten)]
        connect: args::ConnectArgs,
        /// The scheduler: `tcp://HOST:PORT` or `tls://HOST:PORT`.
        #[arg(value_name = "ADDRESS")]
        address: String,
        /// The key: a string, or a JSON list for a tuple key ('["x", 0]').
        #[arg(value_name = "KEY")]
        data_key: String,
        /// A numpy `.npy` file (a C-order array), unless --bytes or --json;
        /// `-` reads stdin.
        #[arg(value_name = "FILE")]
        file: String,
    },
    /// Fetch KEY from the worker that holds it (waiting until it is in
    /// memory): a numpy array goes to FILE as `.npy` (without -o, one line:
    /// its shape, dtype and bytes), bytes to FILE as they are, a plain
    /// value (read from its pickle) prints as one JSON line; anything else
    /// is one line saying what it is, and exit status 1.
    Gather {
        /// Write here instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<String>,
        /// Give up when KEY is not in memory after this many seconds.
        #[arg(long, value_name = "SECONDS", default_value = "30",
              value_parser = args::parse_timeout)]
        timeout: std::time::Duration,
        #[command(flatten)]
        connect: args::ConnectArgs,
        /// The scheduler: `tcp://HOST:PORT` or `tls://HOST:PORT`.
        #[arg(value_name = "ADDRESS")]
        address: String,
        /// The key: a string, or a JSON list for a tuple key.
        #[arg(value_name = "KEY")]
        data_key: String,
    },
    /// Compute FUNCTION(ARG..., **KWARGS) on the cluster and print its
    /// result as `gather` prints a value (one JSON line; an array to `-o
    /// FILE` as `.npy`, or a summary line). FUNCTION is `module:qualname`
    /// (`operator:add`, `numpy.linalg:norm`), importable on the scheduler
    /// and the workers. A task that raises is one line naming the exception
    /// (`ZeroDivisionError: division by zero`) and exit status 1.
    Submit {
        /// The task's key (default: as Dask names a pure call's,
        /// `FUNCTION-<token>`): a string, or a JSON list for a tuple key.
        #[arg(long = "key", value_name = "KEY")]
        task_key: Option<String>,
        /// Keyword arguments: a JSON object (`'{"base": 16}'`).
        #[arg(long, value_name = "JSON")]
        kwargs: Option<String>,
        /// Give up when the result is not in memory after this many seconds.
        #[arg(long, value_name = "SECONDS", default_value = "30",
              value_parser = args::parse_timeout)]
        timeout: std::time::Duration,
        /// Write the result here instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<String>,
        /// Print the task's key and exit, leaving the task to run (Dask's
        /// `fire_and_forget`): its result is not kept once computed, as
        /// Dask's scheduler lets a fire-and-forget key go when it is done,
        /// unless a client holds it.
        #[arg(long, conflicts_with = "output")]
        no_wait: bool,
        #[command(flatten)]
        connect: args::ConnectArgs,
        /// The scheduler: `tcp://HOST:PORT` or `tls://HOST:PORT`.
        #[arg(value_name = "ADDRESS")]
        address: String,
        /// The function: `module:qualname`.
        #[arg(value_name = "FUNCTION")]
        function: String,
        /// Positional arguments: each a JSON value (`1`, `"text"`, `[1, 2]`,
        /// `{"a": 1}`), or `@KEY` for the value of a key in the cluster
        /// (`@["x", 0]` for a tuple key).
        #[arg(value_name = "ARG", allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Dask's published datasets: `list`, `get`, `publish`, `delete` (as
    /// Python's `Client.list_datasets`, `get_dataset`, `publish_dataset`,
    /// `unpublish_dataset`).
    Dataset {
        #[command(subcommand)]
        action: dataset::DatasetCommand,
    },
    /// Print where keys are in memory, as one JSON object `{key:
    /// [worker...]}` (a key the scheduler does not hold has none); every
    /// key when none is given.
    WhoHas {
        #[command(flatten)]
        connect: args::ConnectArgs,
        /// The scheduler: `tcp://HOST:PORT` or `tls://HOST:PORT`.
        #[arg(value_name = "ADDRESS")]
        address: String,
        /// Keys: strings, or JSON lists for tuple keys.
        #[arg(value_name = "KEY")]
        keys: Vec<String>,
    },
    /// Simulate N Dask workers in this process against a real scheduler:
    /// each registers as `dask worker` does, with a listening address of
    /// its own, heart-beats at the interval the scheduler asks, "runs" each
    /// task for --task-ms on --nthreads slots (computing nothing) and
    /// reports a result of --nbytes bytes, fetches dependencies from their
    /// holders with get_data and serves what it holds as bytes of that
    /// size. Runs until interrupted, --for SECONDS, or every worker is
    /// closed by the scheduler; then prints one summary line (tasks per
    /// second, the scheduler's decision latency, the swarm's CPU and
    /// memory) and writes the full results to --output.
    Swarm {
        /// How many workers.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
        workers: u64,
        /// Threads per worker (tasks run at once; more are queued).
        #[arg(long, value_name = "T", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..))]
        nthreads: u32,
        /// The memory limit each worker reports (not enforced).
        #[arg(long, value_name = "BYTES")]
        memory_limit: Option<u64>,
        /// Worker names: the prefix then the worker's index.
        #[arg(long, value_name = "P", default_value = "swarm-")]
        name_prefix: String,
        /// Each worker listens on this host, on a port of its own.
        #[arg(long, value_name = "HOST", default_value = "127.0.0.1")]
        listen_host: String,
        /// How long a task runs: `MS`, or `MIN..MAX` (uniform, fixed per
        /// key).
        #[arg(long, value_name = "MS", default_value = "10", value_parser = swarm::parse_task_ms)]
        task_ms: swarm::TaskTime,
        /// The size of each task's result.
        #[arg(long, value_name = "BYTES", default_value_t = 1000,
              value_parser = swarm::parse_nbytes)]
        nbytes: u64,
        /// Durations and sizes by key prefix (Dask's `key_split`), from a
        /// JSON file: `{"PREFIX": {"task_ms": MS | "MIN..MAX", "nbytes":
        /// BYTES}, ...}`; keys of other prefixes (and fields left out) take
        /// --task-ms and --nbytes.
        #[arg(long, value_name = "FILE")]
        model: Option<String>,
        /// Stop (every worker leaving as a closing Dask worker does) after
        /// this many seconds.
        #[arg(long = "for", value_name = "SECONDS", value_parser = args::parse_timeout)]
        run_for: Option<std::time::Duration>,
        /// Write the results (JSON) here.
        #[arg(long, value_name = "FILE")]
        output: Option<String>,
        /// Draw tasks finished per second and the decision latency's p50
        /// and p99 per second into this PNG file.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<String>,
        /// A worker whose scheduler goes away leaves, as Dask's worker does
        /// (by default it registers again, as a `dask worker` restarted by
        /// its supervisor would).
        #[arg(long)]
        exit_on_scheduler_loss: bool,
        /// Take a dependency held by another worker of the swarm from that
        /// worker's memory instead of fetching it with get_data over a
        /// socket (the scheduler sees the same outcome; the swarm spends
        /// less CPU, and no transfer crosses the network).
        #[arg(long)]
        memory_transfers: bool,
        #[command(flatten)]
        connect: args::ConnectArgs,
        /// The scheduler: `tcp://HOST:PORT` or `tls://HOST:PORT`.
        #[arg(value_name = "ADDRESS")]
        address: String,
    },
    /// Run a loopback client and server in-process: the handshake, then
    /// 64 MiB payloads, large collections and hundreds of small messages,
    /// each verified on arrival; print messages, bytes, throughput, the
    /// payload bytes sent from their own memory and the bytes copied.
    Demo,
}

/// The tap's certificates: `--tls-*` for both sides, `--upstream-tls-*`
/// for the upstream (the CA file defaulting to `--tls-ca-file`, the
/// certificate and key to `--tls-cert` and `--tls-key` together).
fn tap_tls(tls: &tls::TlsArgs, upstream: &tls::UpstreamTlsArgs) -> Result<tap::Tls, String> {
    let listen = tls.config("--tls")?;
    let u = upstream.args();
    let upstream = if u.given() {
        let (cert, key) = match u.cert {
            Some(cert) => (Some(cert), u.key),
            None => (tls.cert.clone(), u.key.or_else(|| tls.key.clone())),
        };
        tls::TlsArgs {
            ca_file: u.ca_file.or_else(|| tls.ca_file.clone()),
            cert,
            key,
        }
        .config("--upstream-tls")?
    } else {
        listen.clone()
    };
    Ok(tap::Tls { listen, upstream })
}

/// `--iterate`: Dask's `iterate_collection` True / False / None.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Iterate {
    Always,
    Never,
    Auto,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = match &cli.command {
        Command::Inspect {
            json,
            deserialize,
            files,
        } => inspect::run(files, *json, *deserialize, &mut out).map(|()| true),
        Command::Roundtrip { file } => roundtrip::run(file, &mut out),
        Command::Encode {
            iterate,
            shard_size,
            first_read,
            json,
        } => {
            let opts = {
                let mut o = SerializeOptions::default();
                o.iterate = match iterate {
                    Iterate::Always => IterateCollection::Always,
                    Iterate::Never => IterateCollection::Never,
                    Iterate::Auto => IterateCollection::Auto,
                };
                o.shard_size = usize::try_from(*shard_size).unwrap_or(usize::MAX);
                o
            };
            encode::run(json, &opts, *first_read, &mut out).map(|()| true)
        }
        Command::Call {
            timeout,
            connect,
            compression,
            checksums,
            address,
            json,
        } => connect.read().and_then(|connect| {
            let opts = call::Options {
                timeout: *timeout,
                connect,
                compression: compression.clone(),
                checksums: *checksums,
            };
            call::run(address, json, &opts, &mut out).map(|()| true)
        }),
        Command::Tap {
            listen,
            upstream,
            tls,
            upstream_tls,
            handshake_timeout,
            timeouts,
            log,
            checksums,
            no_splice,
        } => tap_tls(tls, upstream_tls).and_then(|tls| {
            let opts = tap::Options {
                tcp_timeout: timeouts.tcp_timeout(),
                connect_timeout: timeouts.connect_timeout(),
                checksums: *checksums,
                splice: !*no_splice,
                handshake_timeout: *handshake_timeout,
            };
            tap::run(listen, upstream, tls, log.as_deref(), opts).map(|()| true)
        }),
        Command::Scatter {
            bytes,
            json,
            hold,
            fire_and_forget,
            connect,
            address,
            data_key,
            file,
        } => connect.read().and_then(|opts| {
            let format = match (bytes, json) {
                (true, _) => client::Format::Bytes,
                (_, true) => client::Format::Json,
                _ => client::Format::Npy,
            };
            let keep = match (fire_and_forget, hold) {
                (true, _) => client::Keep::Forever,
                (false, Some(t)) => client::Keep::For(*t),
                (false, None) => client::Keep::UntilInterrupted,
            };
            client::scatter(address, data_key, file, format, keep, &opts, &mut out).map(|()| true)
        }),
        Command::Gather {
            output,
            timeout,
            connect,
            address,
            data_key,
        } => connect.read().and_then(|opts| {
            client::gather(
                address,
                data_key,
                output.as_deref(),
                *timeout,
                &opts,
                &mut out,
            )
            .map(|()| true)
        }),
        Command::Submit {
            task_key,
            kwargs,
            timeout,
            output,
            no_wait,
            connect,
            address,
            function,
            args,
        } => connect.read().and_then(|opts| {
            let submit = client::Submit {
                function,
                args,
                kwargs: kwargs.as_deref(),
                key: task_key.as_deref(),
                timeout: *timeout,
                output: output.as_deref(),
                no_wait: *no_wait,
            };
            client::submit(address, &submit, &opts, &mut out).map(|()| true)
        }),
        Command::Dataset { action } => dataset::run(action, &mut out).map(|()| true),
        Command::WhoHas {
            connect,
            address,
            keys,
        } => connect
            .read()
            .and_then(|opts| client::who_has(address, keys, &opts, &mut out).map(|()| true)),
        Command::Swarm {
            workers,
            nthreads,
            memory_limit,
            name_prefix,
            listen_host,
            task_ms,
            nbytes,
            model,
            run_for,
            output,
            plot,
            exit_on_scheduler_loss,
            memory_transfers,
            connect,
            address,
        } => connect.read().and_then(|connect| {
            let mut task_model = swarm::Model::fixed(*task_ms, *nbytes);
            if let Some(path) = model {
                task_model.load(path)?;
            }
            let opts = swarm::Options {
                scheduler: address.clone(),
                workers: usize::try_from(*workers).unwrap_or(usize::MAX),
                nthreads: *nthreads,
                memory_limit: *memory_limit,
                name_prefix: name_prefix.clone(),
                listen_host: listen_host.clone(),
                model: task_model,
                run_for: *run_for,
                output: output.clone(),
                plot: plot.clone(),
                exit_on_scheduler_loss: *exit_on_scheduler_loss,
                memory_transfers: *memory_transfers,
                connect,
            };
            swarm::run(&opts, &mut out)
        }),
        Command::Demo => demo::run(&mut out).map(|()| true),
    };
    // What was printed before an error stays printed.
    let flushed = out.flush();
    match (result, flushed.map_err(output::error)) {
        (Err(e), _) | (Ok(_), Err(e)) => {
            if e != output::BROKEN_PIPE {
                eprintln!("framewire: {}", one_line(&e));
            }
            ExitCode::FAILURE
        }
        (Ok(true), Ok(())) => ExitCode::SUCCESS,
        (Ok(false), Ok(())) => ExitCode::FAILURE,
    }
}

/// Errors are printed on exactly one line.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}
