#!/usr/bin/env python3
"""The public API of a crate, one item per line, from its rustdoc JSON.

    python3 .ci/public_api.py target/doc/tollgate.json > listing.txt

Every item reachable from the crate's root is listed under the path a user
writes (a re-export under its new name), with its signature: modules,
functions and methods (their generics, arguments and result), structs with
their public fields (and `..` when some are private), enums with their
variants, traits with their items, constants, statics, type aliases and
macros, and for each type the traits it implements, the automatic ones
(`Send`, `Sync`, `Unpin`, ...) included, so that losing one shows. Blanket
implementations (`impl<T> From<T> for T`) are left out: they follow from
the types. Items hidden from the documentation (`#[doc(hidden)]`) are not
API. The lines are sorted, so that a change shows as a diff of the lines it
touches.

Rustdoc's JSON format is unstable; the format versions this reads are
listed in FORMATS, and another one is refused with a clear message rather
than read wrongly.
"""

import json
import sys

FORMATS = {57}


class Api:
    """The crate's index and the lines collected so far."""

    def __init__(self, doc):
        self.index = doc["index"]
        self.paths = doc["paths"]
        self.lines = set()
        self.seen = set()
        # Each item's shortest public path, found by a first walk: a type
        # is written as users reach it, not where it is defined.
        self.public = {}

    def item(self, item_id):
        return self.index.get(str(item_id))

    def full_path(self, item_id, written):
        if item_id in self.public:
            return "::".join(self.public[item_id])
        known = self.paths.get(str(item_id))
        return "::".join(known["path"]) if known else written

    # Types -----------------------------------------------------------------

    def ty(self, t):
        if t is None:
            return "()"
        (kind, v), = t.items()
        if kind == "resolved_path":
            return self.full_path(v["id"], v["path"]) + self.args(v.get("args"))
        if kind == "generic":
            return v
        if kind == "primitive":
            return v
        if kind == "tuple":
            return "(" + ", ".join(self.ty(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        if kind == "slice":
            return "[" + self.ty(v) + "]"
        if kind == "array":
            return "[" + self.ty(v["type"]) + "; " + v["len"] + "]"
        if kind == "borrowed_ref":
            lifetime = v["lifetime"] + " " if v["lifetime"] else ""
            return "&" + lifetime + ("mut " if v["is_mutable"] else "") + self.ty(v["type"])
        if kind == "raw_pointer":
            return "*" + ("mut " if v["is_mutable"] else "const ") + self.ty(v["type"])
        if kind == "impl_trait":
            return "impl " + self.bounds(v)
        if kind == "dyn_trait":
            traits = [self.poly_trait(p) for p in v["traits"]]
            if v.get("lifetime"):
                traits.append(v["lifetime"])
            return "dyn " + " + ".join(traits)
        if kind == "qualified_path":
            trait = self.path(v["trait"]) if v.get("trait") else "_"
            return "<" + self.ty(v["self_type"]) + " as " + trait + ">::" + v["name"] + self.args(v.get("args"))
        if kind == "function_pointer":
            sig = v["sig"]
            inputs = ", ".join(self.ty(t) for _, t in sig["inputs"])
            return "fn(" + inputs + ")" + self.output(sig["output"])
        if kind == "infer":
            return "_"
        if kind == "pat":
            return self.ty(v["type"]) + " is " + v["__pat_unstable_do_not_use"]
        return json.dumps(t, sort_keys=True)

    def path(self, p):
        return self.full_path(p["id"], p["path"]) + self.args(p.get("args"))

    def poly_trait(self, p):
        hrtb = self.generic_params(p.get("generic_params", []))
        return ("for" + hrtb + " " if hrtb else "") + self.path(p["trait"])

    def args(self, a):
        if not a:
            return ""
        (kind, v), = a.items()
        if kind == "angle_bracketed":
            parts = []
            for arg in v["args"]:
                (k, x), = arg.items()
                parts.append(self.ty(x) if k == "type" else (x if isinstance(x, str) else json.dumps(x)))
            for c in v["constraints"]:
                binding = c["binding"]
                if "equality" in binding:
                    (k, x), = binding["equality"].items()
                    value = self.ty(x) if k == "type" else json.dumps(x)
                    parts.append(c["name"] + self.args(c.get("args")) + " = " + value)
                else:
                    parts.append(c["name"] + ": " + self.bounds(binding["constraint"]))
            return "<" + ", ".join(parts) + ">" if parts else ""
        if kind == "parenthesized":
            return "(" + ", ".join(self.ty(t) for t in v["inputs"]) + ")" + self.output(v["output"])
        return "(..)"

    def bounds(self, bounds):
        out = []
        for b in bounds:
            (kind, v), = b.items()
            if kind == "trait_bound":
                modifier = {"none": "", "maybe": "?", "maybe_const": "~const "}.get(v["modifier"], v["modifier"] + " ")
                hrtb = self.generic_params(v.get("generic_params", []))
                out.append(("for" + hrtb + " " if hrtb else "") + modifier + self.path(v["trait"]))
            elif kind == "outlives":
                out.append(v)
            else:
                out.append(json.dumps(b, sort_keys=True))
        return " + ".join(out)

    def output(self, t):
        return "" if t is None else " -> " + self.ty(t)

    # Generics --------------------------------------------------------------

    def generic_params(self, params):
        out = []
        for p in params:
            (kind, v), = p["kind"].items()
            if kind == "lifetime":
                out.append(p["name"] + (": " + " + ".join(v["outlives"]) if v["outlives"] else ""))
            elif kind == "type":
                if v.get("is_synthetic"):
                    continue  # an argument's `impl Trait`, shown there
                text = p["name"] + (": " + self.bounds(v["bounds"]) if v["bounds"] else "")
                if v.get("default"):
                    text += " = " + self.ty(v["default"])
                out.append(text)
            elif kind == "const":
                out.append("const " + p["name"] + ": " + self.ty(v["type"]))
        return "<" + ", ".join(out) + ">" if out else ""

    def where(self, generics):
        out = []
        for w in generics["where_predicates"]:
            (kind, v), = w.items()
            if kind == "bound_predicate":
                hrtb = self.generic_params(v.get("generic_params", []))
                out.append(("for" + hrtb + " " if hrtb else "") + self.ty(v["type"]) + ": " + self.bounds(v["bounds"]))
            elif kind == "lifetime_predicate":
                out.append(v["lifetime"] + ": " + " + ".join(v["outlives"]))
            else:
                out.append(self.ty(v["lhs"]) + " = " + json.dumps(v["rhs"], sort_keys=True))
        return " where " + ", ".join(out) if out else ""

    def function(self, name, f):
        header = f["header"]
        words = [w for w, on in (("const", header["is_const"]), ("async", header["is_async"]),
                                  ("unsafe", header["is_unsafe"])) if on]
        inputs = []
        for arg, t in f["sig"]["inputs"]:
            inputs.append(self.receiver(t) if arg == "self" else arg + ": " + self.ty(t))
        return (" ".join(words + ["fn"]) + " " + name + self.generic_params(f["generics"]["params"])
                + "(" + ", ".join(inputs) + ")" + self.output(f["sig"]["output"]) + self.where(f["generics"]))

    def receiver(self, t):
        if t == {"generic": "Self"}:
            return "self"
        if "borrowed_ref" in t and t["borrowed_ref"]["type"] == {"generic": "Self"}:
            v = t["borrowed_ref"]
            return "&" + (v["lifetime"] + " " if v["lifetime"] else "") + ("mut " if v["is_mutable"] else "") + "self"
        return "self: " + self.ty(t)

    # Items -----------------------------------------------------------------

    def add(self, line):
        self.lines.add(line)

    @staticmethod
    def exhaustive(item):
        """` #[non_exhaustive]` for an item so marked, else nothing."""
        return " #[non_exhaustive]" if "non_exhaustive" in json.dumps(item.get("attrs")) else ""

    def visit(self, item_id, path):
        """Lists the item `item_id`, reachable as `path` (a list of names)."""
        item = self.item(item_id)
        if item is None:
            # A re-export of another crate's item.
            self.add("pub use " + "::".join(path) + " = " + self.full_path(item_id, "?"))
            return
        key = (item_id, tuple(path))
        if key in self.seen:
            return
        self.seen.add(key)
        best = self.public.get(item_id)
        if best is None or (len(path), path) < (len(best), best):
            self.public[item_id] = list(path)
        (kind, v), = item["inner"].items()
        name = "::".join(path)
        handler = getattr(self, "visit_" + kind, None)
        if handler is None:
            self.add(kind + " " + name)
        else:
            handler(item, v, path, name)

    def visit_module(self, item, v, path, name):
        self.add("mod " + name)
        for child_id in v["items"]:
            child = self.item(child_id)
            if child is None or child["visibility"] != "public":
                continue
            if "use" in child["inner"]:
                self.visit_use(child["inner"]["use"], path)
            else:
                self.visit(child_id, path + [child["name"]])

    def visit_use(self, use, path):
        target = use.get("id")
        if use["is_glob"]:
            module = self.item(target) if target is not None else None
            if module is None or "module" not in module["inner"]:
                self.add("pub use " + "::".join(path) + "::* = " + use["source"])
                return
            self.visit_module(module, module["inner"]["module"], path, "::".join(path))
            return
        if target is None:
            self.add("pub use " + "::".join(path + [use["name"]]) + " = " + use["source"])
            return
        self.visit(target, path + [use["name"]])

    def visit_function(self, item, v, path, name):
        self.add("pub " + self.function(name, v))

    def visit_constant(self, item, v, path, name):
        self.add("pub const " + name + ": " + self.ty(v["type"]) + " = " + v["const"]["expr"])

    def visit_static(self, item, v, path, name):
        self.add("pub static " + ("mut " if v["is_mutable"] else "") + name + ": " + self.ty(v["type"]))

    def visit_type_alias(self, item, v, path, name):
        self.add("pub type " + name + self.generic_params(v["generics"]["params"]) + " = " + self.ty(v["type"]))

    def visit_macro(self, item, v, path, name):
        self.add("pub macro " + name)

    def visit_struct(self, item, v, path, name):
        generics = self.generic_params(v["generics"]["params"]) + self.where(v["generics"])
        (shape, fields), = v["kind"].items() if isinstance(v["kind"], dict) else (("unit", None),)
        if shape == "tuple":
            shown = [self.ty(self.item(f)["inner"]["struct_field"]) if f is not None else "_" for f in fields]
            self.add("pub struct " + name + generics + "(" + ", ".join(shown) + ")" + self.exhaustive(item))
        elif shape == "plain":
            stripped = " { .. }" if fields["has_stripped_fields"] else ""
            self.add("pub struct " + name + generics + stripped + self.exhaustive(item))
            for f in fields["fields"]:
                field = self.item(f)
                self.add("pub " + name + "." + field["name"] + ": " + self.ty(field["inner"]["struct_field"]))
        else:
            self.add("pub struct " + name + generics + self.exhaustive(item))
        self.impls(v["impls"], name)

    def visit_union(self, item, v, path, name):
        self.add("pub union " + name + self.generic_params(v["generics"]["params"]))
        self.impls(v["impls"], name)

    def visit_enum(self, item, v, path, name):
        self.add("pub enum " + name + self.generic_params(v["generics"]["params"]) + self.where(v["generics"])
                 + (" { .. }" if v.get("has_stripped_variants") else "") + self.exhaustive(item))
        for variant_id in v["variants"]:
            variant = self.item(variant_id)
            kind = variant["inner"]["variant"]["kind"]
            line = "pub " + name + "::" + variant["name"]
            if isinstance(kind, dict) and "tuple" in kind:
                line += "(" + ", ".join(self.ty(self.item(f)["inner"]["struct_field"]) if f is not None else "_"
                                        for f in kind["tuple"]) + ")"
            elif isinstance(kind, dict) and "struct" in kind:
                fields = [self.item(f) for f in kind["struct"]["fields"]]
                line += " { " + ", ".join(f["name"] + ": " + self.ty(f["inner"]["struct_field"]) for f in fields)
                line += (", .." if kind["struct"]["has_stripped_fields"] else "") + " }"
            discriminant = variant["inner"]["variant"].get("discriminant")
            if discriminant:
                line += " = " + discriminant["expr"]
            self.add(line + self.exhaustive(variant))
        self.impls(v["impls"], name)

    def visit_trait(self, item, v, path, name):
        words = ("unsafe " if v["is_unsafe"] else "") + ("auto " if v["is_auto"] else "")
        bounds = ": " + self.bounds(v["bounds"]) if v["bounds"] else ""
        self.add("pub " + words + "trait " + name + self.generic_params(v["generics"]["params"]) + bounds
                 + self.where(v["generics"]) + ("" if v["is_dyn_compatible"] else " (not dyn-compatible)"))
        for member_id in v["items"]:
            self.member(self.item(member_id), name + "::", in_trait=True)

    def member(self, member, prefix, in_trait=False):
        (kind, m), = member["inner"].items()
        provided = " (provided)" if in_trait and kind == "function" and m["has_body"] else ""
        if kind == "function":
            self.add(prefix + self.function(member["name"], m) + provided)
        elif kind == "assoc_const":
            value = " = " + m["value"] if m.get("value") and not in_trait else ""
            self.add(prefix + "const " + member["name"] + ": " + self.ty(m["type"]) + value)
        elif kind == "assoc_type":
            bounds = ": " + self.bounds(m["bounds"]) if m.get("bounds") else ""
            value = " = " + self.ty(m["type"]) if m.get("type") else ""
            self.add(prefix + "type " + member["name"] + self.generic_params(m["generics"]["params"]) + bounds + value)
        else:
            self.add(prefix + kind + " " + str(member["name"]))

    def impls(self, impl_ids, name):
        for impl_id in impl_ids:
            impl = self.item(impl_id)
            if impl is None:
                continue
            v = impl["inner"]["impl"]
            if v["blanket_impl"] is not None:
                continue
            head = ("unsafe " if v["is_unsafe"] else "") + "impl" + self.generic_params(v["generics"]["params"])
            tail = self.where(v["generics"])
            if v["trait"] is None:
                # Inherent: each public item on its own line.
                prefix = head + " " + self.ty(v["for"]) + tail + " :: pub "
                for member_id in v["items"]:
                    member = self.item(member_id)
                    if member is not None and member["visibility"] == "public":
                        self.member(member, prefix)
            else:
                trait = ("!" if v["is_negative"] else "") + self.path(v["trait"])
                self.add(head + " " + trait + " for " + self.ty(v["for"]) + tail)


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: public_api.py CRATE.json")
    with open(argv[1], encoding="utf-8") as f:
        doc = json.load(f)
    if doc["format_version"] not in FORMATS:
        sys.exit(f"error: {argv[1]} is rustdoc JSON format {doc['format_version']}; "
                 f".ci/public_api.py reads {sorted(FORMATS)}: teach it the new format")
    api = Api(doc)
    root = api.item(doc["root"])
    for _ in range(2):  # the first walk finds the public paths
        api.lines, api.seen = set(), set()
        api.visit(doc["root"], [root["name"]])
    sys.stdout.write("".join(line + "\n" for line in sorted(api.lines)))


if __name__ == "__main__":
    main(sys.argv)
