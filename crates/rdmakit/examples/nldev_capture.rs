//! nldev_capture: send each read-only nldev request this crate knows and write the kernel's
//! raw answer messages to files, for the parser tests under `tests/data/nldev/`.
//!
//! Usage: `nldev_capture OUTDIR [--hex]`. For every request it writes `OUTDIR/<name>.bin`
//! (the answer's netlink messages back to back, exactly as received, without the final
//! DONE/ACK) and `OUTDIR/<name>.req.bin` (the request sent). With `--hex`, every file is also
//! printed to stdout as `FILE <name> <hex>` so that it can be carried out of the lab VM.
//! Nothing is changed on the host: only GET/dump requests are sent.

use rdmakit::nldev::{parse, NldevClient, Request, ResourceKind};
use std::path::{Path, PathBuf};

fn save(dir: &Path, name: &str, bytes: &[u8], hex: bool) -> std::io::Result<()> {
    std::fs::write(dir.join(name), bytes)?;
    if hex {
        let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        println!("FILE {name} {text}");
    }
    Ok(())
}

fn capture(client: &mut NldevClient, dir: &Path, name: &str, req: &Request, hex: bool) {
    if let Err(e) = try_capture(client, dir, name, req, hex) {
        eprintln!("{name}: FAILED: {e}");
        println!("FAILED {name} {e}");
    }
}

fn try_capture(
    client: &mut NldevClient,
    dir: &Path,
    name: &str,
    req: &Request,
    hex: bool,
) -> Result<usize, Box<dyn std::error::Error>> {
    let replies = client.request_raw(req)?;
    let mut all = Vec::new();
    for r in &replies {
        all.extend_from_slice(r);
        // Check the capture parses before saving it.
        for (_, msg) in rdmakit::nldev::message::split_messages(r)? {
            if let netlink_packet_core::NetlinkPayload::InnerMessage(m) = msg.payload {
                parse::any(&m).map_err(|e| format!("{name}: {e}"))?;
            }
        }
    }
    save(dir, &format!("{name}.bin"), &all, hex)?;
    save(dir, &format!("{name}.req.bin"), &req.to_bytes(1), hex)?;
    eprintln!("{name}: {} message(s), {} bytes", replies.len(), all.len());
    Ok(replies.len())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: nldev_capture OUTDIR [--hex]")?);
    let hex = args.any(|a| a == "--hex");
    std::fs::create_dir_all(&dir)?;
    let mut client = NldevClient::open()?;
    capture(&mut client, &dir, "get_dump", &Request::devices(), hex);
    capture(
        &mut client,
        &dir,
        "res_get_dump",
        &Request::resource_summary(),
        hex,
    );
    for dev in client.devices()? {
        let d = dev.name.clone();
        capture(
            &mut client,
            &dir,
            &format!("port_get_{d}"),
            &Request::ports(dev.index, Some(&d)),
            hex,
        );
        for port in 1..=dev.port_count.unwrap_or(1) {
            let p = port;
            capture(
                &mut client,
                &dir,
                &format!("stat_get_{d}_p{p}"),
                &Request::hw_counters(dev.index, Some(&d), p),
                hex,
            );
            capture(
                &mut client,
                &dir,
                &format!("stat_get_status_{d}_p{p}"),
                &Request::counter_status(dev.index, Some(&d), p),
                hex,
            );
            capture(
                &mut client,
                &dir,
                &format!("stat_qp_mode_{d}_p{p}"),
                &Request::qp_counter_mode(dev.index, Some(&d), p),
                hex,
            );
            capture(
                &mut client,
                &dir,
                &format!("stat_qp_dump_{d}_p{p}"),
                &Request::qp_counters(dev.index, Some(&d), p),
                hex,
            );
        }
        for kind in ResourceKind::ALL {
            capture(
                &mut client,
                &dir,
                &format!("res_{}_{d}", kind.name()),
                &Request::resources(kind, dev.index, Some(&d)),
                hex,
            );
        }
    }
    Ok(())
}
