#!/usr/bin/python3
"""The library's layering rules, checked from its sources.

Every `#include "..."` in lib/, providers/ and bootstrap/ is resolved to the
layer that owns the header; a file may include only headers of its own layer
and of the layers below it (LAYERS). Also checked:
  - a header named *_impl.h is private to its directory (and subdirectories);
  - <rdma/...> (libfabric) only in providers/, <pmix...> only in bootstrap/,
    <cuda...> only in providers/gpu/;
  - names defined by the library carry the public prefix `ofccl_` / `OFCCL_`
    only when lib/include/ofccl.h declares them (internal: `ofccl__`, or static
    without a prefix);
  - one struct per name: no tag or typedef name is defined twice.
  - no transport's name in a comparison in lib/core or lib/coll: a transport
    is an ops table, and what differs between them is data.
  - the collectives' entry points (ENTRY_POINTS) never ask a buffer's memory
    kind nor call the GPU peer class: the posting step (lib/coll/post.c) does,
    for every kind alike.
The meson build enforces the include rule too (each layer's static library
sees only its own include directories and those below); this script names
file and line, and covers the rules a compiler cannot see. With --symbols it
reads the layers' static libraries (nm) and reports an object that calls or
uses a symbol another layer defines, unless that layer is below it (a
declaration written by hand, or a header included by a relative path, passes
the include rule but not this one); inside lib/core it also reports a file
that calls a file on its own tier or above (CORE_TIERS), and a file no tier
names, so that no two files of lib/core call each other in a loop; in
lib/base and lib/coll (ACYCLIC_LAYERS) it reports any loop of calls among
files.

Usage: check_layers.py [SOURCE_ROOT]   check a tree (default: this checkout)
       check_layers.py --symbols LAYER LIB [LAYER LIB ...]
                                       check the layers' static libraries
       check_layers.py --self-check    plant violations in small trees (and
                                       symbol tables) and assert each one is
                                       reported
Exit status: 0 clean, 1 violations (listed on stdout), 2 usage error.
"""

import os
import re
import subprocess
import sys
import tempfile

# name, directory, the layers it may include (besides itself). Order matters
# only for reading: dependencies point down.
LAYERS = [
    ("public", "lib/include", set()),
    ("base", "lib/base", {"public"}),
    ("bootstrap", "bootstrap", {"public", "base"}),
    ("providers", "providers", {"public", "base"}),
    ("core", "lib/core", {"public", "base", "bootstrap", "providers"}),
    ("coll", "lib/coll", {"public", "base", "bootstrap", "providers", "core"}),
    ("tools", "lib/tools", {"public", "base", "bootstrap", "providers", "core", "coll"}),
]
# lib/core's files in tiers, lowest first: a file may call files of lower
# tiers only (docs/architecture.md draws them). A new file of lib/core takes
# the lowest tier above every file it calls.
CORE_TIERS = [
    ("foundations", ["lock", "handles", "fault", "topo", "ctrl", "layout", "reduce",
                     "reduce_bf16"]),
    ("communicator state", ["comm_state", "reduce_rate"]),
    ("records and answers", ["coll_state", "dead", "hosts", "notice", "setup_record"]),
    ("services", ["exec", "links", "peer_access", "peers", "trace"]),
    ("communicator at work", ["comm", "setup_status", "wop"]),
    ("descriptors, memory", ["desc", "pool"]),
    ("eager slots", ["eager_slots"]),
    ("reports", ["report"]),
    ("verdicts", ["verdict"]),
    ("engine", ["engine", "dump"]),
    ("waiting, creation", ["wait", "setup"]),
    ("lifecycle", ["progress", "world"]),
    ("context", ["ctx"]),
]
# Files of one tier that may call each other: the reduction kernels' pair
# (the bf16 kernels redo a block in the wider set's code and back).
CORE_PEERS = [{"reduce", "reduce_bf16"}]

# System headers only one layer may include: (prefix, layer).
SYSTEM_OWNERS = [("rdma/", "providers"), ("pmix", "bootstrap")]
# System headers only one directory may include: CUDA's, providers/gpu/ (the
# rest of ofccl sees its calls and opaque handles only).
SYSTEM_DIRS = [("cuda", "providers/gpu/")]
PUBLIC_HEADER = "lib/include/ofccl.h"

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
STRUCT_RE = re.compile(r"\bstruct\s+([A-Za-z_]\w*)\s*\{")
TYPEDEF_END_RE = re.compile(r"^\}\s*([A-Za-z_]\w*)\s*;")
LOWER_RE = re.compile(r"\bofccl_[a-z0-9]\w*")
DEFINE_RE = re.compile(r"^\s*#\s*define\s+(OFCCL_[A-Z0-9]\w*)")


def strip_code(text, literals=True):
    """Comments (and string/char literals unless `literals` is false) blanked,
    line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            if literals:
                out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            else:
                out.append(text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def sources(root):
    """(layer, relative path) of every .c/.h file of every layer."""
    found = []
    for name, d, _ in LAYERS:
        top = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith((".c", ".h")):
                    rel = os.path.relpath(os.path.join(dirpath, f), root)
                    found.append((name, rel))
    return found


def layer_of(rel):
    for name, d, _ in LAYERS:
        if rel == d or rel.startswith(d + "/"):
            return name
    return None


def check_includes(root, files, problems):
    allowed = {name: may | {name} for name, _, may in LAYERS}
    by_name = {}
    for layer, rel in files:
        if rel.endswith(".h"):
            by_name.setdefault(os.path.basename(rel), []).append(rel)
    for base, rels in sorted(by_name.items()):
        if len({layer_of(r) for r in rels}) > 1:
            problems.append("%s: header name also used by %s: an include path "
                            "would pick either" % (rels[0], ", ".join(rels[1:])))
    for layer, rel in files:
        text = strip_code(read(root, rel), literals=False)
        for lineno, line in enumerate(text.split("\n"), 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            kind, target = m.groups()
            where = "%s:%d" % (rel, lineno)
            if kind == "<":
                for prefix, owner in SYSTEM_OWNERS:
                    if target.startswith(prefix) and layer != owner:
                        problems.append("%s: <%s> belongs to %s/ only (layer %s includes it)"
                                        % (where, target, dict_dir(owner), layer))
                for prefix, d in SYSTEM_DIRS:
                    if target.startswith(prefix) and not rel.startswith(d):
                        problems.append("%s: <%s> belongs to %s only" % (where, target, d))
                continue
            hdr = resolve(root, rel, target, by_name)
            if hdr is None:
                problems.append('%s: "%s" is no header of any layer' % (where, target))
                continue
            owner = layer_of(hdr)
            if owner not in allowed[layer]:
                problems.append('%s: layer %s includes "%s" (%s) of layer %s above it or '
                                "beside it; %s may include only %s"
                                % (where, layer, target, hdr, owner, layer,
                                   ", ".join(sorted(allowed[layer]))))
            if os.path.basename(hdr).endswith("_impl.h"):
                home = os.path.dirname(hdr)
                if not (rel.startswith(home + "/")):
                    problems.append('%s: "%s" is private to %s/' % (where, target, home))


def dict_dir(layer):
    return {name: d for name, d, _ in LAYERS}[layer]


def resolve(root, rel, target, by_name):
    """The header an include names: next to the including file first (as the
    compiler looks), else the one header of that name in some layer."""
    near = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if os.path.isfile(os.path.join(root, near)) and layer_of(near):
        return near
    rels = by_name.get(os.path.basename(target), [])
    rels = [r for r in rels if r.endswith("/" + target) or r == target]
    return rels[0] if rels else None


def check_names(root, files, problems):
    public = set(LOWER_RE.findall(strip_code(read(root, PUBLIC_HEADER))))
    public_macros = {m.group(1) for m in
                     (DEFINE_RE.match(l) for l in read(root, PUBLIC_HEADER).split("\n")) if m}
    tags = {}
    for layer, rel in files:
        if rel == PUBLIC_HEADER:
            continue
        text = strip_code(read(root, rel))
        for lineno, line in enumerate(text.split("\n"), 1):
            where = "%s:%d" % (rel, lineno)
            for name in LOWER_RE.findall(line):
                if name not in public:
                    problems.append("%s: %s carries the public prefix but %s does not "
                                    "declare it (internal: ofccl__ or static without prefix)"
                                    % (where, name, PUBLIC_HEADER))
            m = DEFINE_RE.match(line)
            if m and m.group(1) not in public_macros and not m.group(1).endswith("_H"):
                problems.append("%s: macro %s carries the public prefix but %s does not "
                                "define it (internal: OFCCL__)" % (where, m.group(1),
                                                                   PUBLIC_HEADER))
            for tag in STRUCT_RE.findall(line):
                tags.setdefault("struct " + tag, []).append(where)
            m = TYPEDEF_END_RE.match(line)
            if m:
                tags.setdefault(m.group(1), []).append(where)
    for name, wheres in sorted(tags.items()):
        if len(wheres) > 1:
            problems.append("%s: %s is defined again at %s (one definition per name)"
                            % (wheres[0], name, ", ".join(wheres[1:])))


CMP_RE = re.compile(r'\bstr(?:n?case)?n?cmp\s*\(([^;]*)\)')
QUIRK_ROW_RE = re.compile(r'\{"([^"]+)",\s*"([^"]+)"')


def transport_names(root):
    """The names a transport goes by: both columns of the quirk table's rows
    (providers/quirks.c), or the usual ones where the tree has no table."""
    path = os.path.join(root, "providers/quirks.c")
    if not os.path.isfile(path):
        return {"local", "shm", "tcp", "verbs"}
    names = set()
    for prov, alias in QUIRK_ROW_RE.findall(read(root, "providers/quirks.c")):
        names.update({prov, alias})
    return names


def check_transport_names(root, files, problems):
    """Nothing above providers/ branches on a transport's name: a transport
    is an ops table, and what differs is data (the quirk table, the caps)."""
    names = transport_names(root)
    for layer, rel in files:
        if layer not in ("core", "coll"):
            continue
        text = strip_code(read(root, rel), literals=False)
        for lineno, line in enumerate(text.split("\n"), 1):
            for args in CMP_RE.findall(line):
                for lit in re.findall(r'"([^"]*)"', args):
                    if lit in names:
                        problems.append("%s:%d: compares with transport name \"%s\" (ask the "
                                        "transport: a quirk flag or a capability)"
                                        % (rel, lineno, lit))


# Files of the collectives' entry points, and the calls that would make one
# branch on the memory kind.
ENTRY_POINTS = ["lib/coll/calls.c"]
KIND_CALL_RE = re.compile(r"\b(ofccl__mem_kind_of|ofccl__gpu_\w+)\s*\(")


def check_entry_points(root, files, problems):
    """An entry point checks arguments and posts; which memory its buffers
    are, and who serves them, is the posting step's and the chooser's."""
    for layer, rel in files:
        if rel not in ENTRY_POINTS:
            continue
        text = strip_code(read(root, rel))
        for lineno, line in enumerate(text.split("\n"), 1):
            for name in KIND_CALL_RE.findall(line):
                problems.append("%s:%d: an entry point calls %s (the memory kind is the "
                                "posting step's, lib/coll/post.c)"
                                % (rel, lineno, name))


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def check(root):
    problems = []
    if not os.path.isfile(os.path.join(root, PUBLIC_HEADER)):
        return ["%s: missing (is %s a source tree?)" % (PUBLIC_HEADER, root)]
    files = sources(root)
    check_includes(root, files, problems)
    check_names(root, files, problems)
    check_transport_names(root, files, problems)
    check_entry_points(root, files, problems)
    return problems


def nm_symbols(lib):
    """{object: (defined symbols, undefined symbols)} of a static library."""
    out = subprocess.run(["nm", "-P", "-A", "-g", lib], check=True, capture_output=True,
                         text=True).stdout
    objs = {}
    for line in out.split("\n"):
        m = re.match(r"^[^\[]*\[([^\]]+)\]: (\S+) (\S)", line)
        if not m:
            continue
        obj, sym, kind = os.path.basename(m.group(1)), m.group(2), m.group(3)
        defs, undefs = objs.setdefault(obj, (set(), set()))
        (undefs if kind in "Uw" else defs).add(sym)
    return objs


def check_symbols(layers):
    """layers: {layer: {object: (defined, undefined)}}. An object may use
    symbols of its own layer and of the layers LAYERS lets it include."""
    allowed = {name: may | {name} for name, _, may in LAYERS}
    owner = {}
    for layer, objs in layers.items():
        for defs, _ in objs.values():
            for sym in defs:
                owner.setdefault(sym, layer)
    problems = []
    for layer, objs in sorted(layers.items()):
        for obj, (_, undefs) in sorted(objs.items()):
            for sym in sorted(undefs):
                other = owner.get(sym)
                if other is not None and other not in allowed.get(layer, {layer}):
                    problems.append("%s (layer %s) uses %s, defined by layer %s; %s may use "
                                    "only %s" % (obj, layer, sym, other, layer,
                                                 ", ".join(sorted(allowed[layer]))))
    return problems


# Layers of lib/ whose files may not call each other in a loop (lib/core has
# its tiers, which say more).
ACYCLIC_LAYERS = ["base", "coll"]


def check_no_cycles(layer, objs):
    """objs: a layer's {object: (defined, undefined)}. No loop of calls among
    its files: each loop (a strongly connected set) is reported once, with
    one call of each file into the next."""
    owner = {sym: obj for obj, (defs, _) in objs.items() for sym in defs}
    calls = {obj: {} for obj in objs}
    for obj, (_, undefs) in objs.items():
        for sym in sorted(undefs):
            other = owner.get(sym)
            if other is not None and other != obj:
                calls[obj].setdefault(other, sym)
    index, low, stack, on, loops = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(calls[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                loops.append(sorted(comp))

    for v in sorted(calls):
        if v not in index:
            visit(v)
    problems = []
    for comp in loops:
        inside = set(comp)
        edges = ["%s -> %s (%s)" % (a, b, calls[a][b]) for a in comp for b in sorted(calls[a])
                 if b in inside]
        problems.append("layer %s: files that call each other in a loop: %s; calls: %s"
                        % (layer, ", ".join(comp), "; ".join(edges)))
    return problems


def check_core_tiers(objs, tiers=None):
    """objs: lib/core's {object: (defined, undefined)}. Every call from one
    file of lib/core into another goes to a lower tier (or between peers)."""
    tier = {}
    for k, (_, names) in enumerate(tiers or CORE_TIERS):
        for n in names:
            tier[n] = k
    base = {obj: obj.split(".")[0] for obj in objs}
    owner = {}
    for obj, (defs, _) in objs.items():
        for sym in defs:
            owner.setdefault(sym, obj)
    problems = []
    for obj in sorted(objs):
        me = base[obj]
        if me not in tier:
            problems.append("lib/core/%s.c is in no tier of lib/core (CORE_TIERS in %s): place it "
                            "above every file it calls" % (me, os.path.basename(__file__)))
            continue
        for sym in sorted(objs[obj][1]):
            other = owner.get(sym)
            if other is None or other == obj or base[other] not in tier:
                continue
            them = base[other]
            if tier[them] < tier[me] or {me, them} in CORE_PEERS:
                continue
            problems.append("lib/core/%s.c (tier %d) calls %s, defined by lib/core/%s.c (tier "
                            "%d); a file of lib/core calls only files of lower tiers"
                            % (me, tier[me], sym, them, tier[them]))
    return problems


# ---- self-check: each planted violation must be reported, naming its line ----

CLEAN = {
    "lib/include/ofccl.h": "typedef struct ofccl_comm ofccl_comm_t;\n"
                           "int ofccl_barrier(ofccl_comm_t *comm);\n",
    "lib/base/util.h": "#include \"ofccl.h\"\n",
    "bootstrap/boot.h": "#include \"util.h\"\n",
    "providers/prov.h": "#include \"util.h\"\n",
    "providers/prov_impl.h": "#include \"prov.h\"\n",
    "providers/fabric/fabric.h": "#include <rdma/fabric.h>\n#include \"prov_impl.h\"\n",
    "providers/fabric/rma.c": "#include \"fabric.h\"\n",
    "providers/gpu/cuda.c": "#include <cuda.h>\n#include \"prov.h\"\n",
    "bootstrap/pmix.c": "#include <pmix.h>\n#include \"boot.h\"\n",
    "lib/core/core.h": "#include \"boot.h\"\n#include \"prov.h\"\n"
                       "struct ofccl_comm {\n    int rank;\n};\n",
    "lib/core/comm.c": "#include \"core.h\"\n/* \"coll.h\" ofccl_fake in a comment */\n"
                       "static const char *s = \"ofccl_info -c\";\n",
    "lib/coll/coll.h": "#include \"core.h\"\n",
    "lib/coll/barrier.c": "#include \"coll.h\"\n"
                          "static int barrier_unlocked(ofccl_comm_t *c)\n{\n    return 0;\n}\n"
                          "int ofccl_barrier(ofccl_comm_t *c)\n{\n"
                          "    return barrier_unlocked(c);\n}\n",
    "lib/tools/info.c": "#include \"coll.h\"\n#include \"prov.h\"\n",
}

# Each case: what is appended to which files of the clean tree, and the words
# the one report it must cause contains (file and line first).
PLANTED = [
    ([("lib/core/window.c", '#include "core.h"\n#include "coll.h"\n')],
     ["lib/core/window.c:2", "layer core", "coll"]),
    ([("lib/base/log.c", '#include "util.h"\n#include "boot.h"\n')],
     ["lib/base/log.c:2", "layer base", "bootstrap"]),
    ([("providers/post.c", '#include "boot.h"\n')], ["providers/post.c:1", "layer providers"]),
    ([("bootstrap/tcp.c", '#include "prov.h"\n')], ["bootstrap/tcp.c:1", "layer bootstrap"]),
    ([("lib/core/wait.c", '#include "prov_impl.h"\n')], ["lib/core/wait.c:1", "private to"]),
    ([("lib/core/topo.c", "#include <rdma/fi_rma.h>\n")], ["lib/core/topo.c:1", "rdma/"]),
    ([("providers/local.c", "#include <cuda.h>\n")], ["providers/local.c:1", "providers/gpu/"]),
    ([("lib/coll/split.c", '#include "nothere.h"\n')], ["lib/coll/split.c:1", "no header"]),
    ([("lib/coll/post.c", "\nstatic int ofccl_post_unlocked(void)\n{\n    return 0;\n}\n")],
     ["lib/coll/post.c:2", "ofccl_post_unlocked"]),
    ([("lib/core/pool.c", "\n\n#define OFCCL_MODES 3\n")], ["lib/core/pool.c:3", "OFCCL_MODES"]),
    ([("lib/core/ctx.c", '#include "core.h"\nint f(const char *p)\n{\n'
                         '    return strcmp(p, "local") == 0;\n}\n')],
     ["lib/core/ctx.c:4", "transport name", "local"]),
    ([("lib/coll/push.c", "struct view {\n    int a;\n};\n"),
      ("lib/coll/push_plan.c", "\nstruct view {\n    int b;\n};\n")],
     ["lib/coll/push.c:1", "struct view", "lib/coll/push_plan.c:2"]),
    ([("lib/coll/calls.c", '#include "coll.h"\nint f(const void *p)\n{\n'
                           '    return ofccl__mem_kind_of(p) >= 0;\n}\n')],
     ["lib/coll/calls.c:4", "entry point", "ofccl__mem_kind_of"]),
]


def write_tree(root, extra):
    files = dict(CLEAN)
    for rel, text in extra:
        files[rel] = files.get(rel, "") + text
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_check():
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(os.path.join(tmp, "clean"), [])
        got = check(os.path.join(tmp, "clean"))
        if got:
            print("self-check: the clean tree is reported:\n  " + "\n  ".join(got))
            failed += 1
        for i, (plants, words) in enumerate(PLANTED):
            root = os.path.join(tmp, "case%d" % i)
            write_tree(root, plants)
            got = check(root)
            if len(got) != 1 or not all(w in got[0] for w in words):
                print("self-check: case %d (%s): want one report containing %s, got:\n  %s"
                      % (i, plants[0][0], words, "\n  ".join(got) or "(nothing)"))
                failed += 1
    # Symbol tables: core calling into coll, bootstrap into providers; and a
    # clean set (core using providers and base).
    clean = {"base": {"util.c.o": ({"ofccl__now_ns"}, set())},
             "providers": {"mr.c.o": ({"ofccl__mr_reg"}, {"ofccl__now_ns"})},
             "core": {"pool.c.o": ({"ofccl__pool_init"}, {"ofccl__mr_reg", "malloc"})},
             "coll": {"post.c.o": ({"ofccl__post"}, {"ofccl__pool_init"})},
             "bootstrap": {"tcp.c.o": ({"ofccl__boot_open"}, {"ofccl__now_ns"})}}
    sym_cases = [
        (None, None, []),
        ("core", "ofccl__post", ["wait.c.o (layer core) uses ofccl__post", "layer coll"]),
        ("bootstrap", "ofccl__mr_reg", ["wait.c.o (layer bootstrap) uses ofccl__mr_reg"]),
    ]
    for layer, sym, words in sym_cases:
        tables = {k: dict(v) for k, v in clean.items()}
        if layer:
            tables[layer]["wait.c.o"] = (set(), {sym})
        got = check_symbols(tables)
        if (len(got) != 1 or not all(w in got[0] for w in words)) if words else got:
            print("self-check: symbols, %s using %s: want %s, got:\n  %s"
                  % (layer, sym, words or "nothing", "\n  ".join(got) or "(nothing)"))
            failed += 1
    # lib/core's tiers: a clean pair, a call upward (a loop's half), a file
    # in no tier, and the kernels' allowed pair.
    tiers = [("low", ["comm_state", "reduce", "reduce_bf16"]), ("high", ["engine"])]
    core_clean = {"comm_state.c.o": ({"ofccl__comm_fail"}, set()),
                  "engine.c.o": ({"ofccl__coll_start"}, {"ofccl__comm_fail"}),
                  "reduce.c.o": ({"ofccl__reduce"}, {"ofccl__bf16_k"}),
                  "reduce_bf16.c.o": ({"ofccl__bf16_k"}, {"ofccl__reduce"})}
    core_cases = [
        (None, []),
        (("comm_state.c.o", ({"ofccl__comm_fail"}, {"ofccl__coll_start"})),
         ["lib/core/comm_state.c (tier 0) calls ofccl__coll_start", "lib/core/engine.c (tier 1)"]),
        (("window.c.o", ({"ofccl__win"}, {"ofccl__comm_fail"})),
         ["lib/core/window.c is in no tier"]),
    ]
    for plant, words in core_cases:
        objs = dict(core_clean)
        if plant:
            objs[plant[0]] = plant[1]
        got = check_core_tiers(objs, tiers)
        if (len(got) != 1 or not all(w in got[0] for w in words)) if words else got:
            print("self-check: lib/core tiers, %s: want %s, got:\n  %s"
                  % (plant and plant[0], words or "nothing", "\n  ".join(got) or "(nothing)"))
            failed += 1
    # A layer's files in a loop: three files calling around, and a clean chain.
    chain = {"calls.c.o": ({"ofccl_allgather"}, {"ofccl__post"}),
             "post.c.o": ({"ofccl__post"}, {"ofccl__post_allgather"}),
             "allgather.c.o": ({"ofccl__post_allgather"}, {"ofccl__choose"}),
             "select.c.o": ({"ofccl__choose"}, set())}
    loop_cases = [(None, []),
                  (("select.c.o", ({"ofccl__choose"}, {"ofccl__post"})),
                   ["layer coll", "allgather.c.o, post.c.o, select.c.o",
                    "select.c.o -> post.c.o (ofccl__post)"])]
    for plant, words in loop_cases:
        objs = dict(chain)
        if plant:
            objs[plant[0]] = plant[1]
        got = check_no_cycles("coll", objs)
        if (len(got) != 1 or not all(w in got[0] for w in words)) if words else got:
            print("self-check: loops, %s: want %s, got:\n  %s"
                  % (plant and plant[0], words or "nothing", "\n  ".join(got) or "(nothing)"))
            failed += 1
    total = 1 + len(PLANTED) + len(sym_cases) + len(core_cases) + len(loop_cases)
    print("self-check: %d of %d cases right" % (total - failed, total))
    return 1 if failed else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-check":
        return self_check()
    if len(argv) >= 4 and argv[1] == "--symbols" and len(argv) % 2 == 0:
        layers = {argv[i]: nm_symbols(argv[i + 1]) for i in range(2, len(argv), 2)}
        problems = check_symbols(layers)
        if "core" in layers:
            problems += check_core_tiers(layers["core"])
        for layer in ACYCLIC_LAYERS:
            if layer in layers:
                problems += check_no_cycles(layer, layers[layer])
        for p in problems:
            print(p)
        nobj = sum(len(o) for o in layers.values())
        print("%d objects in %d layer libraries: %s" % (nobj, len(layers), "%d violations"
                                                        % len(problems) if problems else "clean"))
        return 1 if problems else 0
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..", "..")
    root = os.path.abspath(root)
    problems = check(root)
    for p in problems:
        print(p)
    nfiles = len(sources(root))
    print("%d files in %d layers: %s" % (nfiles, len(LAYERS),
                                         "%d violations" % len(problems) if problems else "clean"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
