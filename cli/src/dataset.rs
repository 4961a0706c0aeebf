//! `framewire dataset list | get | publish | delete`: Dask's published
//! datasets ([`Client::publish_dataset`] and the rest) from the command
//! line, shared with Python's `Client.publish_dataset` / `get_dataset`.

use std::io::Write;
use std::time::Duration;

use framewire::dask::{Client, Key};
use framewire::Value;

use crate::args::{self, ConnectArgs};
use crate::client::{client_options, key_name, parse_key, runtime, write_value};

/// What `framewire dataset` does.
#[derive(Debug, clap::Subcommand)]
pub enum DatasetCommand {
    /// Print the names of the published datasets, one a line.
    List {
        #[command(flatten)]
        scheduler: Scheduler,
    },
    /// Print the dataset NAME as `gather` prints a value: the value of the
    /// key it holds (a Python `Future`; a list of futures prints as a list
    /// of their values), or the object published when it holds no key (a
    /// plain value; anything else is one line naming what stopped it, and
    /// exit status 1). No dataset NAME: exit status 1.
    Get {
        /// Write here instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<String>,
        /// Give up when the dataset's keys are not in memory after this
        /// many seconds.
        #[arg(long, value_name = "SECONDS", default_value = "30",
              value_parser = args::parse_timeout)]
        timeout: Duration,
        #[command(flatten)]
        scheduler: Scheduler,
        /// The dataset's name: a string, or a JSON list for a tuple.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Publish KEY (in the cluster, e.g. scattered with
    /// `--fire-and-forget`) as the dataset NAME: Python's
    /// `get_dataset(NAME)` gives its `Future`; the dataset keeps the key
    /// until deleted.
    Publish {
        /// Replace a dataset of that name (Python's `override=True`);
        /// without it, a name that exists is an error.
        #[arg(long)]
        replace: bool,
        #[command(flatten)]
        scheduler: Scheduler,
        /// The dataset's name: a string, or a JSON list for a tuple.
        #[arg(value_name = "NAME")]
        name: String,
        /// The key: a string, or a JSON list for a tuple key.
        #[arg(value_name = "KEY")]
        data_key: String,
    },
    /// Delete the dataset NAME (none is fine): the scheduler lets go of
    /// its keys (they stay while a client holds them).
    Delete {
        #[command(flatten)]
        scheduler: Scheduler,
        /// The dataset's name: a string, or a JSON list for a tuple.
        #[arg(value_name = "NAME")]
        name: String,
    },
}

/// The scheduler a `framewire dataset` command talks to, and how.
#[derive(Debug, clap::Args)]
pub struct Scheduler {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The scheduler: `tcp://HOST:PORT` or `tls://HOST:PORT`.
    #[arg(value_name = "ADDRESS")]
    address: String,
}

impl DatasetCommand {
    fn scheduler(&self) -> &Scheduler {
        match self {
            DatasetCommand::List { scheduler }
            | DatasetCommand::Get { scheduler, .. }
            | DatasetCommand::Publish { scheduler, .. }
            | DatasetCommand::Delete { scheduler, .. } => scheduler,
        }
    }
}

/// Runs `framewire dataset ...`.
pub fn run(cmd: &DatasetCommand, out: &mut impl Write) -> Result<(), String> {
    let Scheduler { connect, address } = cmd.scheduler();
    let (connect, address) = (connect.read()?, address.as_str());
    let copts = client_options(address, &connect)?;
    runtime()?.block_on(async {
        let client = Client::connect(address, copts)
            .await
            .map_err(|e| e.to_string())?;
        let done = on(&client, cmd, out).await;
        let closed = client.close().await.map_err(|e| e.to_string());
        done.and(closed)
    })
}

async fn on(client: &Client, cmd: &DatasetCommand, out: &mut impl Write) -> Result<(), String> {
    let e = |e: framewire::dask::ClientError| e.to_string();
    match cmd {
        DatasetCommand::List { .. } => {
            for name in client.list_datasets().await.map_err(e)? {
                writeln!(out, "{}", key_name(&name)).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        DatasetCommand::Get {
            output,
            timeout,
            name,
            ..
        } => {
            let name = parse_key(name)?;
            let Some(ds) = client.get_dataset(name.clone()).await.map_err(e)? else {
                return Err(format!("no dataset {}", key_name(&name)));
            };
            let value = if ds.keys.is_empty() {
                ds.data
            } else {
                let got = values_of(client, &ds.keys, *timeout).await;
                client.release(&ds.keys).map_err(e)?;
                got?
            };
            write_value(&name, &value, output.as_deref(), out)
        }
        DatasetCommand::Publish {
            replace,
            name,
            data_key,
            ..
        } => {
            let name = parse_key(name)?;
            let key = parse_key(data_key)?;
            client
                .publish_dataset(name, std::slice::from_ref(&key), *replace)
                .await
                .map_err(e)
        }
        DatasetCommand::Delete { name, .. } => {
            client.unpublish_dataset(parse_key(name)?).await.map_err(e)
        }
    }
}

/// The values of a dataset's keys (waited for, at most `timeout`): the one
/// value, or a list of them.
async fn values_of(client: &Client, keys: &[Key], timeout: Duration) -> Result<Value, String> {
    match tokio::time::timeout(timeout, client.wait(keys)).await {
        Err(_) => {
            return Err(format!(
                "the dataset's keys are not in memory after {} s",
                timeout.as_secs_f64()
            ))
        }
        Ok(r) => r.map_err(|e| e.to_string())?,
    }
    let mut got = client.gather(keys).await.map_err(|e| e.to_string())?;
    // `wait` held them once more: let that go (the dataset's own hold,
    // from `get_dataset`, is let go by the caller).
    client.release(keys).map_err(|e| e.to_string())?;
    let mut values: Vec<Value> = keys
        .iter()
        .map(|k| got.swap_remove(k).unwrap_or(Value::Nil))
        .collect();
    Ok(match values.len() {
        1 => values.pop().expect("one"),
        _ => Value::Array(values),
    })
}
