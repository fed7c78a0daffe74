//! `rdmactl devices`: the RDMA device and port inventory from sysfs, as a table or as JSON.
//!
//! One row per port: device, port, state, physical state, rate, link layer, netdev, driver and
//! PCI address. `--json` prints the `rdmakit` Snapshot (counters are not read: the inventory
//! opens no counter file). Files that could not be read are summarized on stderr. No device at
//! all exits with code 3. Also home of the small table printer and the error summary that
//! `rdmactl counters` shares.

use crate::exit;
use rdmakit::model::SourceError;
use rdmakit::sysfs::{ReadOptions, SysfsReader};
use rdmakit::Snapshot;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How many unreadable files are listed one by one on stderr before the rest is only counted.
const ERRORS_SHOWN: usize = 3;

/// List RDMA devices and ports: state, rate, link layer, netdev, driver, PCI address.
///
/// Example: `rdmactl devices`, `rdmactl devices --json`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the inventory as JSON (the rdmakit Snapshot, without counters).
    #[arg(long)]
    pub json: bool,
    /// The sysfs root; devices are read from <PATH>/class/infiniband.
    #[arg(long = "path.sysfs", value_name = "PATH", default_value = "/sys")]
    pub path_sysfs: PathBuf,
}

/// Runs `rdmactl devices`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let reader = SysfsReader::new(&args.path_sysfs).with_options(ReadOptions {
        counters: false,
        ..ReadOptions::default()
    });
    let snapshot = reader.snapshot()?;
    if snapshot.devices.is_empty() {
        return Err(no_devices(&args.path_sysfs));
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &snapshot)?;
        writeln!(out)?;
    } else {
        write_table(&mut out, &device_table(&snapshot))?;
    }
    out.flush()?;
    warn_errors(&snapshot.errors);
    Ok(ExitCode::from(exit::OK))
}

/// The "no RDMA device" error (exit code 3) for a sysfs root.
pub(crate) fn no_devices(root: &Path) -> anyhow::Error {
    exit::CodedError::no_rdma(format!(
        "no RDMA devices under {} (no RDMA driver loaded? `rdmactl lab up` gives a Soft-RoCE \
         device to play with)",
        root.join("class").join("infiniband").display()
    ))
}

/// A table: a header row, then rows; `right` marks right-aligned (numeric) columns.
pub(crate) struct Table {
    /// Column titles.
    pub headers: Vec<&'static str>,
    /// Right-align this column.
    pub right: Vec<bool>,
    /// Cells, one Vec per row, as many as headers.
    pub rows: Vec<Vec<String>>,
}

/// Print a table with columns separated by two spaces; the last column is not padded.
pub(crate) fn write_table(out: &mut impl Write, table: &Table) -> std::io::Result<()> {
    let columns = table.headers.len();
    let mut widths: Vec<usize> = table.headers.iter().map(|h| h.chars().count()).collect();
    for row in &table.rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let headers: Vec<String> = table.headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&headers).chain(&table.rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate().take(columns) {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            let right = table.right.get(i).copied().unwrap_or(false);
            if right {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if i + 1 < columns {
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// `-` for absent values.
pub(crate) fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// One row per port (one row with dashes for a device without ports).
fn device_table(snapshot: &Snapshot) -> Table {
    let mut rows = Vec::new();
    for dev in &snapshot.devices {
        let driver = or_dash(dev.driver.as_deref());
        let pci = or_dash(dev.pci_addr.as_deref());
        if dev.ports.is_empty() {
            let mut row = vec![dev.name.clone()];
            row.extend(std::iter::repeat_n("-".to_owned(), 6));
            row.push(driver);
            row.push(pci);
            rows.push(row);
            continue;
        }
        for port in &dev.ports {
            rows.push(vec![
                dev.name.clone(),
                port.num.to_string(),
                or_dash(port.state.as_ref().map(|s| s.name.as_str())),
                or_dash(port.phys_state.as_ref().map(|s| s.name.as_str())),
                or_dash(port.rate.as_ref().map(|r| r.text.as_str())),
                or_dash(port.link_layer.as_deref()),
                or_dash(port.netdev.as_deref()),
                driver.clone(),
                pci.clone(),
            ]);
        }
    }
    Table {
        headers: vec![
            "DEVICE",
            "PORT",
            "STATE",
            "PHYS_STATE",
            "RATE",
            "LINK_LAYER",
            "NETDEV",
            "DRIVER",
            "PCI",
        ],
        right: vec![false, true],
        rows,
    }
}

/// Summarize unreadable files on stderr: the first few, then a count.
pub(crate) fn warn_errors(errors: &[SourceError]) {
    if errors.is_empty() {
        return;
    }
    let mut err = std::io::stderr().lock();
    // stderr failures are not worth failing the command for.
    let _ = writeln!(
        err,
        "rdmactl: warning: {} sysfs file(s) could not be read (--json lists them all):",
        errors.len()
    );
    for e in errors.iter().take(ERRORS_SHOWN) {
        let _ = writeln!(err, "  {e}");
    }
    if errors.len() > ERRORS_SHOWN {
        let _ = writeln!(err, "  ... and {} more", errors.len() - ERRORS_SHOWN);
    }
}
