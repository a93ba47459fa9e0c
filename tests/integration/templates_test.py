#!/usr/bin/python3
"""Checks the OneFlow service templates and VM templates under templates/.

Run by templates_test.sh with ONEHPC_BIN (one-hpc) and ONEHPC_SOURCE_DIR. Every check prints
PASS or FAIL with the reason; the last line is "N passed, M failed". Needs python3-jsonschema
(Debian) for the schema checks.
"""

import copy
import json
import os
import re
import sys

SRC = os.environ.get("ONEHPC_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
TEMPLATES = os.path.join(SRC, "templates")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, TEMPLATES)
import generate  # noqa: E402  (templates/generate.py)

PASSED, FAILED, NOTES = [], [], []


def check(name, ok, why=""):
    if ok:
        PASSED.append(name)
        print(f"PASS {name}")
    else:
        FAILED.append(name)
        print(f"FAIL {name}: {why}")
    return ok


def note(text):
    NOTES.append(text)
    print(f"NOTE {text}")


# ---- OpenNebula template syntax (KEY = "v", KEY = [ K = "v", ... ], # comments) -------------

class TemplateSyntaxError(Exception):
    pass


def parse_one_template(text):
    """[(KEY, value)] where value is a string or a list of (K, v) pairs; keys upper-cased."""
    pos, n, out = 0, len(text), []

    def skip():
        nonlocal pos
        while pos < n:
            if text[pos].isspace():
                pos += 1
            elif text[pos] == "#":
                while pos < n and text[pos] != "\n":
                    pos += 1
            else:
                break

    def ident():
        nonlocal pos
        skip()
        m = re.compile(r"[A-Za-z0-9_]+").match(text, pos)
        if not m:
            raise TemplateSyntaxError(f"expected a name at offset {pos}: {text[pos:pos + 20]!r}")
        pos = m.end()
        return m.group(0).upper()

    def expect(ch):
        nonlocal pos
        skip()
        if pos >= n or text[pos] != ch:
            raise TemplateSyntaxError(f"expected {ch!r} at offset {pos}: {text[pos:pos + 20]!r}")
        pos += 1

    def value():
        nonlocal pos
        skip()
        if pos < n and text[pos] == '"':
            pos += 1
            buf = []
            while True:
                if pos >= n:
                    raise TemplateSyntaxError("unterminated string")
                c = text[pos]
                if c == "\\" and pos + 1 < n and text[pos + 1] in '"\\':
                    buf.append(text[pos + 1])
                    pos += 2
                elif c == '"':
                    pos += 1
                    return "".join(buf)
                else:
                    buf.append(c)
                    pos += 1
        m = re.compile(r"[^\s,\]\[\"=#]+").match(text, pos)
        if not m:
            raise TemplateSyntaxError(f"expected a value at offset {pos}")
        pos = m.end()
        return m.group(0)

    while True:
        skip()
        if pos >= n:
            return out
        key = ident()
        expect("=")
        skip()
        if pos < n and text[pos] == "[":
            pos += 1
            pairs = []
            while True:
                k = ident()
                expect("=")
                pairs.append((k, value()))
                skip()
                if pos < n and text[pos] == ",":
                    pos += 1
                    continue
                expect("]")
                break
            out.append((key, pairs))
        else:
            out.append((key, value()))


# ---- helpers --------------------------------------------------------------------------------

REF = re.compile(r"\$\{([^}]*)\}")
NIC_ATTRS = {"IP", "MAC", "MASK", "NETWORK", "GATEWAY", "DNS", "SEARCH_DOMAIN", "MTU", "METRIC",
             "METHOD", "VLAN_ID", "IP6", "IP6_ULA", "IP6_GATEWAY", "IP6_METRIC", "IP6_METHOD",
             "IP6_PREFIX_LENGTH", "EXTERNAL", "ROUTES"}


def strings_in(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from strings_in(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings_in(v)


def ref_problem(ref, role, roles_by_name):
    """None if `${ref}` inside `role` can be resolved by OneFlow, else why not."""
    parts = ref.split(".")
    if len(parts) < 3:
        return f"${{{ref}}}: expected ${{role.template.path}}, ${{role.user_template.ATTR}} or " \
               "${role.vm.id}"
    parent, path = parts[0], [p.upper() for p in parts[1:]]
    if parent not in roles_by_name:
        return f"${{{ref}}}: no role named {parent!r}"
    if parent not in role.get("parents", []):
        return f"${{{ref}}}: {parent!r} is not a parent of {role['name']!r} (references resolve " \
               "from parents only)"
    if not all(re.fullmatch(r"[A-Z0-9_]+", p) for p in path):
        return f"${{{ref}}}: path parts must be attribute names"
    if path == ["VM", "ID"]:
        return None  # //VM/ID: the parent VM's own id (its one VM element)
    if path[0] == "USER_TEMPLATE":
        return None if len(path) == 2 else f"${{{ref}}}: expected user_template.ATTR"
    if path[0] != "TEMPLATE":
        return f"${{{ref}}}: the path must start with template or user_template"
    nics = roles_by_name[parent].get("template_contents", {}).get("NIC", [])
    if path[1] == "CONTEXT" and len(path) == 3:
        m = re.fullmatch(r"ETH(\d+)_([A-Z0-9_]+)", path[2])
        if m:
            if int(m.group(1)) >= len(nics):
                return f"${{{ref}}}: role {parent!r} has {len(nics)} NIC(s), no ETH{m.group(1)}"
            if m.group(2) not in NIC_ATTRS:
                return f"${{{ref}}}: ETHn_{m.group(2)} is not a context NIC attribute"
            return None
        return None if path[2] in generate.STANDARD_CONTEXT or path[2].startswith("ONEAPP_") \
            else f"${{{ref}}}: {path[2]} is not a context variable of the parent"
    if path[1] == "NIC" and len(path) == 3:
        if not nics:
            return f"${{{ref}}}: role {parent!r} has no NIC"
        return None if path[2] in NIC_ATTRS else f"${{{ref}}}: NIC/{path[2]} is not a NIC attribute"
    return f"${{{ref}}}: unsupported path (template.context.X, template.nic.X, user_template.X, " \
           "vm.id)"


def spec_problem(name, spec):
    parts = spec.split("|")
    if len(parts) != 5:
        return f"{name}: {spec!r} does not have 5 |-separated fields"
    mo, itype, _desc, params, default = parts
    if mo not in ("M", "O"):
        return f"{name}: first field must be M or O"
    if itype not in generate.INPUT_TYPES:
        return f"{name}: unknown input type {itype!r}"
    if itype in ("range", "range-float"):
        m = re.fullmatch(r"(-?\d+)\.\.(-?\d+)", params)
        if not m or int(m.group(1)) > int(m.group(2)):
            return f"{name}: range needs params MIN..MAX, got {params!r}"
        if default and not (re.fullmatch(r"-?\d+", default) and
                            int(m.group(1)) <= int(default) <= int(m.group(2))):
            return f"{name}: default {default!r} outside {params}"
    if itype == "number" and default and not re.fullmatch(r"-?\d+", default):
        return f"{name}: number default {default!r}"
    if itype in ("list", "list-multiple"):
        options = params.split(",") if params else []
        if not options:
            return f"{name}: list without options"
        if default and any(d not in options for d in default.split(",")):
            return f"{name}: default {default!r} not among {options}"
    if itype == "boolean" and default not in ("", "YES", "NO"):
        return f"{name}: boolean default must be YES or NO, got {default!r}"
    if mo == "M" and default:
        return f"{name}: mandatory input with a default"
    return None


def topo_order(roles):
    """Role names in an order where parents come first; None if the graph has a cycle."""
    deps = {r["name"]: set(r.get("parents", [])) for r in roles}
    order, done = [], set()
    while len(order) < len(deps):
        ready = [n for n in deps if n not in done and deps[n] <= done]
        if not ready:
            return None
        for n in sorted(ready):
            order.append(n)
            done.add(n)
    return order


# ---- the checks -----------------------------------------------------------------------------

def accepted_mutations(validator, doc, mutations):
    """The names of the mutations (name -> function changing a copy of `doc`) that the schema
    still accepts: a schema that accepts a broken variant proves nothing about it."""
    accepted = []
    for what, mutate in mutations.items():
        d = copy.deepcopy(doc)
        mutate(d)
        if validator.is_valid(d):
            accepted.append(what)
    return accepted


def check_schema(svc_id, doc, schema):
    try:
        import jsonschema
    except ImportError:
        check(f"{svc_id}: JSON Schema (OneFlow 7.x)", False,
              "python3-jsonschema is not installed (apt-get install python3-jsonschema)")
        return
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    check(f"{svc_id}: valid against templates/schema/oneflow-service-7.schema.json", not errors,
          "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5]))
    # The schema must reject what OneFlow 7.x rejects, or it proves nothing.
    mutations = {
        "role without template_id": lambda d: d["roles"][0].pop("template_id"),
        "6.x vm_template field": lambda d: d["roles"][0].update(vm_template=1),
        "6.x custom_attrs": lambda d: d.update(custom_attrs={}),
        "role name with a space": lambda d: d["roles"][0].update(name="a b"),
        "bad input spec": lambda d: d.update(user_inputs={"ONEAPP_X": "O|text|no default"}),
        "unknown input type": lambda d: d.update(user_inputs={"ONEAPP_X": "O|texts|d||"}),
        "negative cardinality": lambda d: d["roles"][0].update(cardinality=-1),
        "bad deployment": lambda d: d.update(deployment="parallel"),
        "template_id as string": lambda d: d["roles"][0].update(template_id="0"),
        "no roles": lambda d: d.update(roles=[]),
    }
    bad = accepted_mutations(validator, doc, mutations)
    check(f"{svc_id}: the schema rejects broken variants", not bad, "accepted: " + ", ".join(bad))


def check_service(svc, doc, schema):
    sid = svc.id
    check_schema(sid, doc, schema)
    roles = doc["roles"]
    by_name = {r["name"]: r for r in roles}

    check(f"{sid}: role names unique", len(by_name) == len(roles),
          f"duplicates in {[r['name'] for r in roles]}")
    missing = [(r["name"], p) for r in roles for p in r.get("parents", []) if p not in by_name]
    check(f"{sid}: every parent exists", not missing, f"missing (role, parent): {missing}")
    selfp = [r["name"] for r in roles if r["name"] in r.get("parents", [])]
    check(f"{sid}: role graph acyclic", not selfp and topo_order(roles) is not None,
          f"cycle among the roles (self-parents: {selfp})")
    uses_parents = any(r.get("parents") for r in roles)
    check(f"{sid}: parents need deployment straight",
          not uses_parents or doc.get("deployment") == "straight",
          f"deployment is {doc.get('deployment')!r}")
    card = [r["name"] for r in roles if not (r.get("min_vms", 0) <= r.get("cardinality", 0) <=
                                            r.get("max_vms", 1 << 31))]
    check(f"{sid}: min_vms <= cardinality <= max_vms", not card, f"roles {card}")

    # networks
    declared = set(doc.get("networks", {}))
    used, bad_nets = set(), []
    for r in roles:
        for nic in r.get("template_contents", {}).get("NIC", []):
            ref = nic.get("NETWORK_ID", "")
            if not ref.startswith("$") or ref[1:] not in declared:
                bad_nets.append((r["name"], ref))
            used.add(ref[1:])
    check(f"{sid}: every NIC uses a declared network and every network is used",
          not bad_nets and used == declared, f"bad NICs {bad_nets}, unused {declared - used}")

    # ${role.xpath} references
    problems, count = [], 0
    for r in roles:
        for s in strings_in(r.get("template_contents", {})):
            for ref in REF.findall(s):
                count += 1
                p = ref_problem(ref, r, by_name)
                if p:
                    problems.append(f"role {r['name']}: {p}")
            if "${" in s and s.count("${") != len(REF.findall(s)):
                problems.append(f"role {r['name']}: unterminated reference in {s!r}")
    check(f"{sid}: every ${{role...}} reference resolvable ({count})", not problems,
          "; ".join(problems))

    # input specs
    specs = dict(doc.get("user_inputs", {}))
    for r in roles:
        specs.update(r.get("user_inputs", {}))
    bad_specs = [p for p in (spec_problem(n, s) for n, s in specs.items()) if p]
    check(f"{sid}: every input spec well-formed ({len(specs)})", not bad_specs,
          "; ".join(bad_specs))

    # inputs and wiring against one-hpc's settings
    wiring_names = {n for r in svc.roles for n in r.get("wiring", {})}
    declared_vars = set(specs) | wiring_names
    unknown = sorted(n for n in declared_vars if n not in svc.known)
    if unknown:
        text = "declared in the template but unknown to one-hpc: " + ", ".join(unknown)
        if svc.strict:
            check(f"{sid}: every input and wiring variable known to one-hpc", False, text)
        else:
            note(f"{sid} (not strict yet): {text}")
            check(f"{sid}: unknown variables are all in the pending list",
                  all(n in svc.pending for n in unknown),
                  f"not in pending_settings: {[n for n in unknown if n not in svc.pending]}")
    else:
        check(f"{sid}: every input and wiring variable known to one-hpc", True)
    if svc.pending_now_known:
        note(f"{sid}: pending_settings now known to one-hpc (remove them from the description): "
             + ", ".join(svc.pending_now_known))
    if svc.strict:
        check(f"{sid}: strict service has no pending settings", not svc.pending,
              f"pending: {svc.pending}")

    unknown_roles = sorted(set(svc.program_roles) - set(svc.known_roles))
    if unknown_roles:
        text = (f"program roles unknown to one-hpc: {', '.join(unknown_roles)} "
                f"(one-hpc knows: {', '.join(svc.known_roles) or 'none'})")
        if svc.strict:
            check(f"{sid}: every program role known to one-hpc", False, text)
        else:
            note(f"{sid} (not strict yet): {text}")
    else:
        check(f"{sid}: every program role known to one-hpc", True)

    read_by_service = {n for r in svc.roles for n in svc.reads(r)}
    ignored = sorted(n for n in specs if n not in read_by_service)
    check(f"{sid}: no input that no role of the service reads", not ignored,
          "offered but read by no role: " + ", ".join(ignored))
    wired_as_input = sorted(n for n in specs if n in wiring_names)
    check(f"{sid}: wiring variables are not user inputs", not wired_as_input,
          ", ".join(wired_as_input))

    # A secret reaches only the roles that read it: a service input would reach every role's
    # CONTEXT (and every role refuses another role's secret at boot).
    leaks = []
    for s in svc.settings:
        if not generate.is_secret(s):
            continue
        readers = set(svc.readers(s["name"]))
        if s["name"] in doc.get("user_inputs", {}) and readers != set(by_name):
            leaks.append(f"{s['name']} is a service input but only {sorted(readers)} read it")
        for r in roles:
            if s["name"] in r.get("user_inputs", {}) and r["name"] not in readers:
                leaks.append(f"{s['name']} is an input of role {r['name']}, which does not read it")
            if s["name"] in r.get("template_contents", {}) or \
                    s["name"] in r.get("template_contents", {}).get("CONTEXT", {}):
                leaks.append(f"{s['name']} is in the template_contents of role {r['name']}")
    check(f"{sid}: every secret is offered only to the roles that read it", not leaks,
          "; ".join(leaks))

    fixed = set(svc.context)
    missing = []
    for r in svc.roles:
        offered = set(doc.get("user_inputs", {})) | set(by_name[r["name"]].get("user_inputs", {}))
        offered |= set(r.get("wiring", {})) | fixed
        for n in svc.reads(r):
            if n not in offered:
                missing.append(f"{r['name']}:{n}")
    check(f"{sid}: every setting a role reads is offered to that role", not missing,
          "not offered: " + ", ".join(missing))
    for r in svc.roles:
        tc = by_name[r["name"]].get("template_contents", {})
        wrong = [n for n, v in r.get("wiring", {}).items() if tc.get(n) != v]
        check(f"{sid}: role {r['name']} carries its wiring in template_contents", not wrong,
              f"{wrong}")


def check_oneslurm(doc):
    roles = {r["name"]: r for r in doc["roles"]}
    want = {
        "deployment straight": doc.get("deployment") == "straight",
        "ready_status_gate": doc.get("ready_status_gate") is True,
        "one network named Service": list(doc.get("networks", {})) == ["Service"],
        "roles controller and worker": sorted(roles) == ["controller", "worker"],
    }
    c, w = roles.get("controller", {}), roles.get("worker", {})
    want["controller: 1 VM"] = c.get("cardinality") == 1 and c.get("max_vms", 1) == 1
    want["worker: child of controller"] = w.get("parents") == ["controller"]
    want["worker: the controller's VM id wired"] = w.get("template_contents", {}).get(
        "ONEAPP_SLURM_CONTROLLER_VM_ID") == "${controller.vm.id}"
    want["worker: default 1, min_vms 1, max_vms 100"] = (
        w.get("cardinality"), w.get("min_vms"), w.get("max_vms")) == (1, 1, 100)
    want["cooldown 30 s"] = c.get("cooldown") == 30 and w.get("cooldown") == 30
    want["anti-spoofing on every NIC of the Service network"] = spoof_filtered(doc, "Service")
    bad = [k for k, ok in want.items() if not ok]
    check("oneslurm: the shape the issue asks for", not bad, ", ".join(bad))


def spoof_filtered(doc, network):
    """Every NIC of every role on `network` has OpenNebula's IP and MAC anti-spoofing filters
    (its peers trust addresses: NFS exports, the munge key server), and only those NICs."""
    nics = [n for r in doc["roles"] for n in r.get("template_contents", {}).get("NIC", [])]
    on = [n for n in nics if n.get("NETWORK_ID") == "$" + network]
    others = [n for n in nics if n.get("NETWORK_ID") != "$" + network]
    return bool(on) and all(n.get("FILTER_IP_SPOOFING") == "YES" and
                            n.get("FILTER_MAC_SPOOFING") == "YES" for n in on) and not any(
        "FILTER_IP_SPOOFING" in n for n in others)


def check_ood(doc):
    roles = {r["name"]: r for r in doc["roles"]}
    want = {
        "networks Management and Compute": sorted(doc.get("networks", {})) ==
        ["Compute", "Management"],
        "roles storage, portal, worker": sorted(roles) == ["portal", "storage", "worker"],
        "portal child of storage": roles.get("portal", {}).get("parents") == ["storage"],
        "worker child of storage and portal":
            sorted(roles.get("worker", {}).get("parents", [])) == ["portal", "storage"],
        "ready gate, straight": doc.get("ready_status_gate") is True and
        doc.get("deployment") == "straight",
    }
    inputs = doc.get("user_inputs", {})
    for n in ("ONEAPP_HOME_NFS_ENABLED", "ONEAPP_HOME_NFS_SERVER", "ONEAPP_HOME_NFS_EXPORT"):
        want[f"wizard input {n}"] = n in inputs
    # The users' passwords: the portal's input only, never in a storage or worker VM.
    users = "ONEAPP_AUTH_LOCAL_USERS"
    want[f"{users} an input of the portal role only"] = (
        users not in inputs and
        [r["name"] for r in roles.values() if users in r.get("user_inputs", {})] == ["portal"])
    for r in roles.values():
        want[f"{r['name']}: ONEAPP_ROLE wired"] = bool(
            r.get("template_contents", {}).get("ONEAPP_ROLE"))
    refs = " ".join(strings_in([r.get("template_contents", {}) for r in roles.values()]))
    want["storage address by reference"] = "${storage.template.context.ETH1_IP}" in refs
    # The workers follow the portal through the OneGate service document (a replaced portal
    # has a new address); a ${portal...} reference is resolved once at deployment and would go
    # stale, so none may be wired.
    want["portal address followed through OneGate, not wired"] = (
        "${portal.template.context.ETH1_IP}" not in refs)
    # The portal's VM id is wired as a first place to look: a worker checks that VM through
    # OneGate and reads the role's list when it is gone (a stale id costs one request).
    want["worker: the portal's VM id wired"] = roles.get("worker", {}).get(
        "template_contents", {}).get("ONEAPP_SLURM_CONTROLLER_VM_ID") == "${portal.vm.id}"
    want["anti-spoofing on every NIC of the Compute network"] = spoof_filtered(doc, "Compute")
    # one-hpc finds the compute NIC by this name (host::kComputeNicName), never by position.
    compute_nics = [n for r in doc["roles"] for n in r.get("template_contents", {}).get("NIC", [])
                    if n.get("NETWORK_ID") == "$Compute"]
    want["every role's Compute NIC is named 'compute'"] = len(compute_nics) == 3 and all(
        n.get("NAME") == "compute" for n in compute_nics)
    bad = [k for k, ok in want.items() if not ok]
    check("open-ondemand: the shape the issue asks for", not bad, ", ".join(bad))


def check_vm_template(svc, text, doc):
    sid = svc.id
    try:
        attrs = parse_one_template(text)
    except TemplateSyntaxError as e:
        check(f"{sid}: VM template parses", False, str(e))
        return
    check(f"{sid}: VM template parses", True)
    top = {}
    for k, v in attrs:
        top.setdefault(k, v)
    context = dict(top.get("CONTEXT", []))
    inputs = dict(top.get("USER_INPUTS", []))
    fixed = {k: context.get(k) for k in ("TOKEN", "REPORT_READY", "NETWORK")}
    check(f"{sid}: CONTEXT has TOKEN, REPORT_READY and NETWORK = YES",
          all(v == "YES" for v in fixed.values()), f"{fixed}")
    unknown = sorted(k for k in context
                     if k not in svc.known and k not in generate.STANDARD_CONTEXT)
    pending_only = [k for k in unknown if k in svc.pending]
    really_unknown = [k for k in unknown if k not in svc.pending]
    if pending_only and not svc.strict:
        note(f"{sid} (not strict yet): CONTEXT variables declared but unknown to one-hpc: "
             + ", ".join(pending_only))
    check(f"{sid}: every CONTEXT variable known to the settings tables",
          not really_unknown and (not svc.strict or not pending_only),
          "unknown to one-hpc: " + ", ".join(really_unknown + (pending_only if svc.strict else [])))
    wiring = set(svc.wiring_names())
    bad_refs = []
    for k, v in context.items():
        for ref in re.findall(r"\$([A-Za-z0-9_]+)(?![A-Za-z0-9_\[])", v):
            if ref not in inputs and ref not in wiring:
                bad_refs.append(f"{k}=${ref}")
    check(f"{sid}: every CONTEXT $reference is a user input or a wiring value", not bad_refs,
          ", ".join(bad_refs))
    unref = sorted(n for n in inputs if context.get(n) != "$" + n)
    check(f"{sid}: every USER_INPUT reaches CONTEXT", not unref, ", ".join(unref))
    order = top.get("INPUTS_ORDER", "")
    check(f"{sid}: INPUTS_ORDER lists the USER_INPUTS",
          (order.split(",") if order else []) == list(inputs), f"{order!r}")
    bad_specs = [p for p in (spec_problem(n, s) for n, s in inputs.items()) if p]
    check(f"{sid}: every USER_INPUT spec well-formed", not bad_specs, "; ".join(bad_specs))
    # The VM template serves every role, so it carries no secret that some role does not
    # read (those roles would find it in their CONTEXT): OneFlow gives it to the roles that
    # read it through their own user inputs. Everything else is offered by both templates.
    role_only = set(svc.role_only_secrets())
    carried = sorted(n for n in role_only if n in inputs or n in context)
    check(f"{sid}: VM template carries no secret that some role does not read", not carried,
          ", ".join(carried))
    svc_specs = dict(doc.get("user_inputs", {}))
    for r in doc["roles"]:
        svc_specs.update(r.get("user_inputs", {}))
    for n in role_only:
        svc_specs.pop(n, None)
    differ = sorted(n for n in set(inputs) | set(svc_specs) if inputs.get(n) != svc_specs.get(n))
    check(f"{sid}: VM template and service template offer the same inputs (but role-only "
          "secrets)", not differ, ", ".join(differ))
    check(f"{sid}: DISK names the image", dict(top.get("DISK", [])).get("IMAGE") ==
          svc.desc["image"]["name"], f"{top.get('DISK')}")
    check(f"{sid}: DISK is on virtio (DEV_PREFIX vd)", dict(top.get("DISK", [])).get("DEV_PREFIX") == "vd",
          f"{top.get('DISK')}")


# ---- OneFlow 6.10 ----------------------------------------------------------------------------

def oneflow_610_resolve(contents, role_values, service_values, network_ids):
    """What OneFlow 6.10 makes of a role's vm_template_contents at instantiation, as its code
    does it (OpenNebula/one 6.10 src/oca/ruby/opennebula/flow/service.rb): resolve_attributes
    scans the string once for `$NAME` (\\w+), then for each name found, in that order, replaces
    every `$NAME` (a plain gsub: also the head of a longer name) with the role's value, else the
    service's, else leaves it; resolve_networks then does the same with the networks' ids."""
    for key in re.findall(r"\$(\w+)", contents):
        if key in role_values:
            contents = contents.replace("$" + key, role_values[key])
        elif key in service_values:
            contents = contents.replace("$" + key, service_values[key])
    for key in re.findall(r"\$(\w+)", contents):
        if key in network_ids:
            contents = contents.replace("$" + key, network_ids[key])
    return contents


def check_schema_610(sid, doc, schema):
    import jsonschema
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    check(f"{sid} 6.10: valid against templates/schema/oneflow-service-6.10.schema.json",
          not errors, "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5]))
    mutations = {
        "role without vm_template": lambda d: d["roles"][0].pop("vm_template"),
        "7.x template_id field": lambda d: d["roles"][0].update(template_id=1),
        "7.x type field": lambda d: d["roles"][0].update(type="vm"),
        "7.x user_inputs": lambda d: d.update(user_inputs={}),
        "vm_template_contents as an object": lambda d: d["roles"][0].update(
            vm_template_contents={"A": "b"}),
        "vm_template as string": lambda d: d["roles"][0].update(vm_template="0"),
        "bad custom_attrs spec": lambda d: d.update(custom_attrs={"ONEAPP_X": "O|text|no default"}),
        "role name with a space": lambda d: d["roles"][0].update(name="a b"),
        "negative cardinality": lambda d: d["roles"][0].update(cardinality=-1),
        "bad deployment": lambda d: d.update(deployment="parallel"),
    }
    bad = accepted_mutations(validator, doc, mutations)
    check(f"{sid} 6.10: the schema rejects broken variants", not bad, "accepted: " + ", ".join(bad))


def check_service_610(svc, doc, doc7, vm_text, schema):
    """The 6.10 variant gives each role's VMs what the 7.x template gives them."""
    sid = svc.id
    try:
        check_schema_610(sid, doc, schema)
    except ImportError:
        check(f"{sid} 6.10: JSON Schema", False, "python3-jsonschema is not installed")
    same_top = [k for k in ("name", "description", "deployment", "ready_status_gate",
                            "automatic_deletion", "shutdown_action", "networks")
                if doc.get(k) != doc7.get(k)]
    check(f"{sid} 6.10: service fields as in 7.x", not same_top, f"differ: {same_top}")
    check(f"{sid} 6.10: custom_attrs are 7.x's service user_inputs",
          doc.get("custom_attrs", {}) == doc7.get("user_inputs", {}))
    roles7 = {r["name"]: r for r in doc7["roles"]}
    check(f"{sid} 6.10: the same roles in the same order",
          [r["name"] for r in doc["roles"]] == [r["name"] for r in doc7["roles"]])
    vm_context = {}
    try:
        vm_context = dict(dict(parse_one_template(vm_text)).get("CONTEXT", []))
    except TemplateSyntaxError:
        pass
    secrets = set(svc.role_only_secrets())
    # Values that do not spell their names: a clash must show as a wrong value.
    service_values = {n: f"service value {i}" for i, n in enumerate(doc.get("custom_attrs", {}))}
    network_ids = {n: f"{i + 100}" for i, n in enumerate(doc.get("networks", {}))}
    problems = []
    for r in doc["roles"]:
        name = r["name"]
        r7 = roles7.get(name, {})
        for key in ("cardinality", "parents", "min_vms", "max_vms", "cooldown",
                    "shutdown_action", "elasticity_policies", "scheduled_policies"):
            if r.get(key) != r7.get(key):
                problems.append(f"{name}: {key} {r.get(key)!r} (7.x: {r7.get(key)!r})")
        if r.get("custom_attrs", {}) != r7.get("user_inputs", {}):
            problems.append(f"{name}: custom_attrs differ from 7.x's role user_inputs")
        role_values = {n: f"{name} value {i}" for i, n in enumerate(r.get("custom_attrs", {}))}
        resolved = oneflow_610_resolve(r.get("vm_template_contents", ""), role_values,
                                       service_values, network_ids)
        try:
            attrs = parse_one_template(resolved)
        except TemplateSyntaxError as e:
            problems.append(f"{name}: vm_template_contents does not parse after substitution: {e}")
            continue
        # What the VMs of this role get in 7.x, resolved the same way.
        tc7 = r7.get("template_contents", {})
        want_nics = [{k.upper(): (network_ids.get(v[1:], v) if k == "NETWORK_ID" else v)
                      for k, v in nic.items()} for nic in tc7.get("NIC", [])]
        got_nics = [dict(v) for k, v in attrs if k == "NIC"]
        if got_nics != want_nics:
            problems.append(f"{name}: NICs {got_nics} (7.x: {want_nics})")
        top = {k: v for k, v in attrs if k not in ("NIC", "CONTEXT")}
        if len(top) != len([k for k, _ in attrs if k not in ("NIC", "CONTEXT")]):
            problems.append(f"{name}: an attribute is set twice")
        want = {k.upper(): v for k, v in tc7.items() if k != "NIC"}
        offered = list(doc7.get("user_inputs", {})) + list(r7.get("user_inputs", {}))
        for n in offered:
            if n in secrets:
                continue
            want[n] = role_values.get(n, service_values.get(n))
            if vm_context.get(n) != "$" + n:
                problems.append(f"{name}: {n} is set but the VM template's CONTEXT does not "
                                f"pick it up")
        if top != want:
            diff = sorted(k for k in set(top) | set(want) if top.get(k) != want.get(k))
            problems.append(f"{name}: attributes differ from what 7.x gives: " +
                            ", ".join(f"{k}={top.get(k)!r} (want {want.get(k)!r})" for k in diff))
        context = [dict(v) for k, v in attrs if k == "CONTEXT"]
        got_context = context[0] if len(context) == 1 else ({} if not context else None)
        want_context = {n: role_values[n] for n in r7.get("user_inputs", {}) if n in secrets}
        if got_context != want_context:
            problems.append(f"{name}: CONTEXT {got_context} (want the role's own secrets: "
                            f"{want_context})")
        for n in secrets:
            if n in doc.get("custom_attrs", {}) or (n in r.get("vm_template_contents", "") and
                                                    n not in r7.get("user_inputs", {})):
                problems.append(f"{name}: secret {n} reaches a role that does not read it")
    check(f"{sid} 6.10: each role's VMs get what the 7.x template gives them (OneFlow 6.10's "
          "substitution simulated)", not problems, "; ".join(problems))


def check_610_simulation_sees_prefix_clashes():
    """The check above can fail: two inputs where one name is the head of the other, in the
    order that OneFlow 6.10 would corrupt."""
    resolved = oneflow_610_resolve('A = "$ONEAPP_X"\nB = "$ONEAPP_X_Y"', {},
                                   {"ONEAPP_X": "1", "ONEAPP_X_Y": "2"}, {})
    got = dict(parse_one_template(resolved))
    check("6.10: the substitution's simulation sees a name that is the head of another",
          got == {"A": "1", "B": "1_Y"}, f"{got}")
    resolved = oneflow_610_resolve('B = "$ONEAPP_X_Y"\nA = "$ONEAPP_X"', {},
                                   {"ONEAPP_X": "1", "ONEAPP_X_Y": "2"}, {})
    check("6.10: the generator's order (longer name first) is safe",
          dict(parse_one_template(resolved)) == {"A": "1", "B": "2"})


def main():
    binary = os.environ.get("ONEHPC_BIN")
    if not binary:
        print("ONEHPC_BIN is not set")
        print("0 passed, 1 failed")
        return 1
    try:
        settings = generate.load_settings(one_hpc=binary)
    except generate.GenerateError as e:
        check("one-hpc settings --all", False, str(e))
        print(f"{len(PASSED)} passed, {len(FAILED)} failed")
        return 1
    check("one-hpc settings --all gives the fields the generator needs",
          all({"secret", "required", "min", "max", "choices"} <= set(s) for s in settings),
          "missing secret/required/min/max/choices in some entries")
    with open(os.path.join(TEMPLATES, "schema", "oneflow-service-7.schema.json")) as f:
        schema = json.load(f)
    with open(os.path.join(TEMPLATES, "schema", "oneflow-service-6.10.schema.json")) as f:
        schema610 = json.load(f)
    for what, sch in (("7.x", schema), ("6.10", schema610)):
        try:
            import jsonschema
            jsonschema.Draft7Validator.check_schema(sch)
            check(f"the {what} schema is a valid draft-07 schema", True)
        except ImportError:
            pass
        except Exception as e:  # jsonschema.SchemaError
            check(f"the {what} schema is a valid draft-07 schema", False, str(e))

    for sid in generate.SERVICES:
        try:
            desc = generate.load_description(sid)
            svc = generate.Service(desc, settings)
        except (generate.GenerateError, OSError, KeyError) as e:
            check(f"{sid}: description loads", False, str(e))
            continue
        path = os.path.join(TEMPLATES, "oneflow", sid + ".json")
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            check(f"{sid}: oneflow/{sid}.json is well-formed JSON", True)
        except (OSError, json.JSONDecodeError) as e:
            check(f"{sid}: oneflow/{sid}.json is well-formed JSON", False, str(e))
            continue
        check_service(svc, doc, schema)
        {"oneslurm": check_oneslurm, "open-ondemand": check_ood}[sid](doc)
        vm_text = ""
        try:
            with open(os.path.join(TEMPLATES, "vm", sid + ".tmpl"), encoding="utf-8") as f:
                vm_text = f.read()
            check_vm_template(svc, vm_text, doc)
        except OSError as e:
            check(f"{sid}: vm/{sid}.tmpl readable", False, str(e))
        try:
            with open(os.path.join(TEMPLATES, "oneflow-6.10", sid + ".json"),
                      encoding="utf-8") as f:
                doc610 = json.load(f)
            check_service_610(svc, doc610, doc, vm_text, schema610)
        except (OSError, json.JSONDecodeError) as e:
            check(f"{sid}: oneflow-6.10/{sid}.json is well-formed JSON", False, str(e))
    check_610_simulation_sees_prefix_clashes()

    try:
        files = generate.outputs(settings)
        stale = []
        for rel, text in sorted(files.items()):
            try:
                with open(os.path.join(TEMPLATES, rel), encoding="utf-8", newline="") as f:
                    if f.read() != text:
                        stale.append(rel)
            except FileNotFoundError:
                stale.append(rel + " (missing)")
        check("regenerating gives the committed bytes", not stale,
              "out of date: " + ", ".join(stale) +
              " -- run: templates/generate.py --one-hpc BUILD/one-hpc")
    except generate.GenerateError as e:
        check("regenerating gives the committed bytes", False, str(e))

    print(f"{len(PASSED)} passed, {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
