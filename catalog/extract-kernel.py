#!/usr/bin/env python3
"""List every RDMA driver's hw_counters file names from a Linux kernel source tree.

Usage:
    extract-kernel.py KERNEL_TREE              print the extraction (TSV) on stdout
    extract-kernel.py KERNEL_TREE -o FILE      write it to FILE
    extract-kernel.py KERNEL_TREE --source TEXT -o FILE   also record where the tree came from
    extract-kernel.py --table CATALOG_DIR [--rdmactl PATH]   the driver x kernel table

The extraction reads drivers/infiniband/{hw,sw}/*/ of the tree: every table a driver hands to
rdma_alloc_hw_stats_struct (struct rdma_stat_desc arrays, mlx5's mlx5_ib_counter arrays,
mlx4's diag_counter arrays, hfi1's chip.c cntr_entry tables) is expanded with a small C
macro expander (enough for #name, a ## b and the X-macro lists these drivers use), and each
name is written with its level (device, port, or netlink for counters the kernel only shows
over RDMA netlink), the file that declares it, and how the driver multiplies it at run time.

hfi1 builds its file names at run time (chip.c init_cntrs): per-VL counters get the VL number
appended (0-7 and 15), per-SDMA-engine counters the engine number (0-15), both through
snprintf into a 16-byte buffer (so at most 15 characters survive), and every 32-bit counter
gets ",32" appended after that. The extraction applies the same rules; RcvHdrOvr<ctx> exists
for each receive context the device has (at most 160).

ionic takes its counter names from the device firmware at run time: the extraction records
the driver with no names and says so.

Output lines (tab separated, sorted):  driver  level  name  declared_in  expansion
The first line is "# kernel VERSION" read from the tree's Makefile; with --source TEXT a
second line "# source: TEXT" records where the tree came from. Readers skip lines that
start with "#" after the first.

--table prints, per driver and kernel series, how many counters the kernel declares, how many
of them the catalog describes (its entries whose `kernels` name that series, as loaded by
tomllib), and how many `rdmactl explain` finds (run with --rdmactl PATH). rdmakit's test
catalog_kernel.rs is the check: it fails when the catalog and catalog/kernel/*.tsv disagree.
Python standard library only.
"""

import argparse
import os
import re
import sys

# Which tables each driver hands to the core, and at which level. A table the scan finds in a
# driver directory but that is not listed here makes the extraction fail: a new kernel grew a
# table someone must classify.
DRIVERS = {
    "mlx5": {
        "dir": "hw/mlx5",
        "tables": {
            "basic_q_cnts": "port",
            "out_of_seq_q_cnts": "port",
            "retrans_q_cnts": "port",
            "extended_err_cnts": "port",
            "roce_accl_cnts": "port",
            "cong_cnts": "port",
            "ext_ppcnt_cnts": "port",
            # switchdev representor ports: the same counters with a vport_ prefix
            "vport_basic_q_cnts": "port",
            "vport_out_of_seq_q_cnts": "port",
            "vport_retrans_q_cnts": "port",
            "vport_extended_err_cnts": "port",
            "vport_roce_accl_cnts": "port",
            # optional counters (IB_STAT_FLAG_OPTIONAL): off by default, never in sysfs,
            # enabled and read with `rdma statistic` over netlink
            "basic_op_cnts": "netlink",
            "rdmarx_cnp_op_cnts": "netlink",
            "rdmatx_cnp_op_cnts": "netlink",
            "packets_op_cnts": "netlink",
        },
    },
    "mlx4": {
        "dir": "hw/mlx4",
        "tables": {
            "diag_basic": "device+port",
            "diag_ext": "device+port",
            "diag_device_only": "device",
        },
    },
    "bnxt_re": {"dir": "hw/bnxt_re", "tables": {"bnxt_re_stat_descs": "port"}},
    "irdma": {
        "dir": "hw/irdma",
        "tables": {"irdma_hw_stat_names": "port", "irdma_hw_stat_descs": "port"},
    },
    "efa": {
        "dir": "hw/efa",
        "tables": {"efa_device_stats_descs": "device", "efa_port_stats_descs": "port"},
    },
    "hns": {"dir": "hw/hns", "tables": {"hns_roce_port_stats_descs": "port"}},
    "erdma": {"dir": "hw/erdma", "tables": {"erdma_descs": "port"}},
    "mana": {
        "dir": "hw/mana",
        "tables": {
            "mana_ib_port_stats_desc": "port",
            "mana_ib_device_stats_desc": "device",
        },
    },
    "cxgb4": {"dir": "hw/cxgb4", "tables": {"cxgb4_descs": "device"}},
    "rxe": {"dir": "sw/rxe", "tables": {"rxe_counter_descs": "port"}},
    "hfi1": {
        "dir": "hw/hfi1",
        "tables": {"dev_cntrs": "device", "port_cntrs": "port"},
    },
    "ionic": {"dir": "hw/ionic", "tables": {}, "runtime": "names come from the device firmware"},
}

# Drivers with no hw_counters at all: the scan checks that they still declare none.
NO_COUNTERS = ["qedr", "siw", "vmw_pvrdma", "usnic", "ocrdma", "mthca", "qib", "rdmavt"]

TABLE_RE = re.compile(
    r"(?:static\s+)?(?:const\s+)?struct\s+(rdma_stat_desc|mlx5_ib_counter|diag_counter|cntr_entry)"
    r"\s+(\w+)\s*\[[^\]]*\]\s*=\s*\{"
)
DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)[ \t]*(.*)$")
STRING_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def join_continuations(text):
    return re.sub(r"\\\n", " ", text)


def function_macros(text):
    """name -> (params, body) for every function-like #define of a (comment-free) text."""
    macros = {}
    for line in join_continuations(text).split("\n"):
        m = DEFINE_RE.match(line)
        if m:
            params = [p.strip() for p in m.group(2).split(",") if p.strip()]
            macros[m.group(1)] = (params, m.group(3).strip())
    return macros


def split_args(text):
    """Splits a macro call's argument text at top-level commas."""
    args, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    args.append("".join(cur).strip())
    return args


def matching_paren(text, start):
    """Index of the parenthesis closing the one at text[start]."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unbalanced parentheses")


def substitute(params, body, args):
    """One macro body with its arguments: #p stringifies, a ## b pastes."""
    values = dict(zip(params, args))

    def stringify(m):
        return '"' + values[m.group(1)].replace('"', '\\"') + '"'

    names = "|".join(re.escape(p) for p in params) or "(?!)"
    out = re.sub(r"(?<!#)#\s*(" + names + r")\b", stringify, body)
    out = re.sub(r"\b(" + names + r")\b", lambda m: values[m.group(1)], out)
    return re.sub(r"\s*##\s*", "", out)


def expand(text, macros, depth=0):
    """Expands every function-like macro call in text, repeatedly."""
    if depth > 20:
        raise ValueError("macro expansion too deep")
    out, i, changed = [], 0, False
    ident = re.compile(r"[A-Za-z_]\w*")
    while i < len(text):
        if text[i] == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
            continue
        m = ident.match(text, i)
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            name = m.group(0)
            k = m.end()
            while k < len(text) and text[k] in " \t\n":
                k += 1
            if name in macros and k < len(text) and text[k] == "(":
                end = matching_paren(text, k)
                params, body = macros[name]
                args = split_args(text[k + 1 : end]) if params else []
                out.append(" " + substitute(params, body, args) + " ")
                i = end + 1
                changed = True
                continue
            out.append(name)
            i = m.end()
            continue
        out.append(text[i])
        i += 1
    result = "".join(out)
    return expand(result, macros, depth + 1) if changed else result


def table_body(text, open_brace):
    """The text between a table's braces (open_brace indexes its '{')."""
    depth, i = 0, open_brace
    while i < len(text):
        c = text[i]
        if c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1 : i]
        i += 1
    raise ValueError("unbalanced table")


def concat_strings(text):
    """Adjacent C string literals of text, joined (C concatenates them)."""
    return "".join(m.group(1) for m in STRING_RE.finditer(text))


def desc_names(body):
    """Names of an rdma_stat_desc / mlx5_ib_counter / diag_counter table, in order."""
    names = []
    for m in re.finditer(r"\.name\s*=\s*((?:\"(?:[^\"\\]|\\.)*\"\s*)+)", body):
        names.append(concat_strings(m.group(1)))
    return names


def hfi1_entries(body):
    """(name, flags) of hfi1's cntr_entry tables: `[C_X] = { "name", csr, offset, flags, fn }`."""
    entries = []
    for m in re.finditer(r"\[\s*\w+\s*\]\s*=\s*\{", body):
        inner = table_body(body, m.end() - 1)
        args = split_args(inner)
        entries.append((concat_strings(args[0]), args[3] if len(args) > 3 else ""))
    return entries


def hfi1_names(entries):
    """File names as chip.c init_cntrs writes them: VL and SDMA suffixes, then ",32"."""
    out = []
    for name, flags in entries:
        if "CNTR_DISABLED" in flags:
            continue
        suffix = ",32" if "CNTR_32BIT" in flags else ""
        if "CNTR_VL" in flags:
            for vl in list(range(8)) + [15]:
                out.append(((name + str(vl))[:15] + suffix, "per-VL"))
        elif "CNTR_SDMA" in flags:
            for engine in range(16):
                out.append(((name + str(engine))[:15] + suffix, "per-SDMA-engine"))
        elif re.fullmatch(r"RcvHdrOvr\d+", name):
            out.append((name + suffix, "per-receive-context"))
        else:
            out.append((name + suffix, ""))
    return out


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def kernel_version(tree):
    text = read(os.path.join(tree, "Makefile"))
    fields = dict(re.findall(r"^(VERSION|PATCHLEVEL|SUBLEVEL)\s*=\s*(\d+)", text, flags=re.M))
    return "%s.%s.%s" % (fields["VERSION"], fields["PATCHLEVEL"], fields.get("SUBLEVEL", "0"))


def extract(tree):
    ib = os.path.join(tree, "drivers", "infiniband")
    rows = []
    problems = []
    for driver, spec in sorted(DRIVERS.items()):
        ddir = os.path.join(ib, spec["dir"])
        if not os.path.isdir(ddir):
            continue
        files = sorted(f for f in os.listdir(ddir) if f.endswith((".c", ".h")))
        texts = {f: strip_comments(read(os.path.join(ddir, f))) for f in files}
        macros = {}
        for f in files:
            if f.endswith(".h"):
                macros.update(function_macros(texts[f]))
        found = set()
        for f in files:
            text = texts[f]
            local = dict(macros)
            local.update(function_macros(text))
            for m in TABLE_RE.finditer(text):
                kind, table = m.group(1), m.group(2)
                if driver == "hfi1" and kind != "cntr_entry":
                    continue
                if kind == "cntr_entry" and driver != "hfi1":
                    continue
                level = spec["tables"].get(table)
                if level is None:
                    problems.append("%s: unclassified table %s in %s" % (driver, table, f))
                    continue
                found.add(table)
                body = expand(table_body(text, m.end() - 1), local)
                declared = "drivers/infiniband/%s/%s" % (spec["dir"], f)
                if kind == "cntr_entry":
                    named = hfi1_names(hfi1_entries(body))
                else:
                    named = [(n, "") for n in desc_names(body)]
                if not named:
                    problems.append("%s: no names found in table %s" % (driver, table))
                for name, expansion in named:
                    for lvl in level.split("+"):
                        rows.append((driver, lvl, name, declared, expansion))
        if "runtime" in spec:
            stats = [f for f in files if "alloc_hw" in texts[f] or "rdma_alloc_hw_stats_struct" in texts[f]]
            declared = "drivers/infiniband/%s/%s" % (spec["dir"], stats[0] if stats else files[0])
            rows.append((driver, "port", "*", declared, spec["runtime"]))
    for driver in NO_COUNTERS:
        for sub in ("hw", "sw"):
            ddir = os.path.join(ib, sub, driver)
            if not os.path.isdir(ddir):
                continue
            for f in os.listdir(ddir):
                if f.endswith(".c") and re.search(
                    r"alloc_hw_(port|device)_stats\s*=", read(os.path.join(ddir, f))
                ):
                    problems.append("%s: now has hw_counters (%s); classify it" % (driver, f))
    # Any other driver directory that hands stats to the core.
    known = {spec["dir"] for spec in DRIVERS.values()}
    for sub in ("hw", "sw"):
        for d in sorted(os.listdir(os.path.join(ib, sub))):
            rel = "%s/%s" % (sub, d)
            ddir = os.path.join(ib, rel)
            if rel in known or d in NO_COUNTERS or not os.path.isdir(ddir):
                continue
            for f in os.listdir(ddir):
                if f.endswith(".c") and re.search(
                    r"alloc_hw_(port|device)_stats\s*=", read(os.path.join(ddir, f))
                ):
                    problems.append("%s: unknown driver with hw_counters (%s)" % (rel, f))
    return sorted(set(rows)), problems


def load_extractions(kernel_dir):
    """version -> set of (driver, level, name), from catalog/kernel/*.tsv."""
    out = {}
    for f in sorted(os.listdir(kernel_dir)):
        if not f.endswith(".tsv"):
            continue
        lines = read(os.path.join(kernel_dir, f)).splitlines()
        version = lines[0].split()[-1]
        rows = set()
        for line in lines[1:]:
            if line.startswith("#"):
                continue
            driver, level, name, _declared, _exp = line.split("\t")
            rows.add((driver, level, name))
        out[version] = rows
    return out


def series(version):
    """6.12.118 -> 6.12: the catalog names kernel series, not stable releases."""
    return ".".join(version.split(".")[:2])


def catalog_kernels(catalog_dir):
    """(driver, name) -> set of series from the catalog's `kernels` fields."""
    import tomllib

    out = {}
    for f in sorted(os.listdir(catalog_dir)):
        if not f.endswith(".toml") or f == "rules.toml":
            continue
        with open(os.path.join(catalog_dir, f), "rb") as fh:
            data = tomllib.load(fh)
        for c in data.get("counter", []):
            out[(data["family"], c["name"])] = set(c.get("kernels", []))
    return out


def table(catalog_dir, rdmactl):
    import subprocess

    ext = load_extractions(os.path.join(catalog_dir, "kernel"))
    cat = catalog_kernels(catalog_dir)
    versions = sorted(ext, key=lambda v: tuple(int(x) for x in v.split(".")))
    drivers = sorted({d for rows in ext.values() for d, _l, _n in rows})
    print("driver\tkernel\tupstream\tcatalog\texplained")
    for d in drivers:
        for v in versions:
            names = sorted({n for dd, _l, n in ext[v] if dd == d})
            if names == ["*"]:
                print("%s\t%s\tfirmware\tfirmware\tfirmware" % (d, series(v)))
                continue
            # mlx5's vport_ names are the same counters (the family's alias prefix).
            def key(n):
                return n[len("vport_"):] if d == "mlx5" and n.startswith("vport_") else n
            in_cat = [n for n in names if series(v) in cat.get((d, key(n)), set())]
            explained = "-"
            if rdmactl:
                explained = 0
                for n in in_cat:
                    r = subprocess.run([rdmactl, "explain", "--driver", d, n, "--path.sysfs", "/nonexistent"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                    # exit 0 after a note means another family has the name: not explained.
                    explained += r.returncode == 0 and r.stdout.startswith((d + "/").encode())
            print("%s\t%s\t%d\t%d\t%s" % (d, series(v), len(names), len(in_cat), explained))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tree", nargs="?", help="kernel source tree (with drivers/infiniband)")
    ap.add_argument("-o", "--output", help="write the extraction here instead of stdout")
    ap.add_argument("--source", help="where the tree came from (written as a '# source:' line)")
    ap.add_argument("--table", metavar="CATALOG_DIR", help="print the driver x kernel coverage table")
    ap.add_argument("--rdmactl", help="with --table: count what `rdmactl explain` finds")
    args = ap.parse_args()
    if args.table:
        table(args.table, args.rdmactl)
        return 0
    if not args.tree:
        ap.error("give a kernel source tree or --table CATALOG_DIR")
    if not os.path.isdir(os.path.join(args.tree, "drivers", "infiniband")):
        print("error: %s has no drivers/infiniband" % args.tree, file=sys.stderr)
        return 2
    version = kernel_version(args.tree)
    rows, problems = extract(args.tree)
    for p in problems:
        print("error: " + p, file=sys.stderr)
    if problems:
        return 1
    text = "# kernel %s\n" % version
    if args.source:
        text += "# source: %s\n" % " ".join(args.source.split())
    text += "".join("\t".join(r) + "\n" for r in rows)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
