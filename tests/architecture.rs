//! The library's shape, checked (docs/ARCHITECTURE.md, "Layers"): no source
//! file imports a file that, directly or through others, imports it back, and
//! each layer imports only the layers below it.
//!
//! Every path in a file (`use` trees, paths in code and types, and `crate::`,
//! `super::` or `self::` paths inside macro calls) is resolved to the file of
//! the module it names; a name a module re-exports (`pub use`) is followed to
//! the file that defines it, so a parent that gathers its children's names is
//! not counted as a step of every import that goes through it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// The library's top-level modules from the highest layer to the lowest; a
/// module may import any module of its own layer or a lower one (no loop of
/// files allowed, as everywhere).
const LAYERS: &[&[&str]] = &[
    &["mount"],
    &["run"],
    &["remote"],
    &["inspect"],
    &["archive"],
    &["synth"],
    &["safetensors"],
    &["dsl"],
    &["codec"],
    &["wire"],
    &[
        "atomic", "input", "runs", "signals", "scratch", "space", "units", "error",
    ],
];

type ModPath = Vec<String>;

/// What the first pass learns of the crate: its modules (a file, or a `mod`
/// block inside one) and the names each brings into scope with `use`.
#[derive(Default)]
struct Crate {
    files: BTreeMap<ModPath, PathBuf>,
    /// Every module, with the module path of the file it is written in.
    modules: HashMap<ModPath, ModPath>,
    uses: HashMap<ModPath, HashMap<String, ModPath>>,
}

fn module_path_of(src: &Path, file: &Path) -> ModPath {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: ModPath = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
        path.pop();
    }
    path
}

/// The library's files, leaving out the files of test-only modules (named
/// `tests.rs` or `tests/`), whose code is test code like any `#[cfg(test)]`
/// block.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|name| name != "bin" && name != "tests")
            {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && path.file_stem().is_some_and(|stem| stem != "tests")
        {
            out.push(path);
        }
    }
}

/// The paths a `use` tree names, each with the name it binds (none for a glob).
fn expand_use(tree: &syn::UseTree, prefix: &mut ModPath, out: &mut Vec<(ModPath, Option<String>)>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            expand_use(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) if name.ident == "self" => {
            out.push((prefix.clone(), prefix.last().cloned()));
        }
        syn::UseTree::Name(name) => {
            let mut full = prefix.clone();
            full.push(name.ident.to_string());
            out.push((full, Some(name.ident.to_string())));
        }
        syn::UseTree::Rename(rename) => {
            let mut full = prefix.clone();
            full.push(rename.ident.to_string());
            out.push((full, Some(rename.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(group) => {
            for item in &group.items {
                expand_use(item, prefix, out);
            }
        }
    }
}

impl Crate {
    fn load(src: &Path) -> (Crate, Vec<(ModPath, syn::File)>) {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let mut krate = Crate::default();
        let mut parsed = Vec::new();
        for file in paths {
            let module = module_path_of(src, &file);
            let text = std::fs::read_to_string(&file).unwrap();
            let ast =
                syn::parse_file(&text).unwrap_or_else(|err| panic!("{}: {err}", file.display()));
            krate.files.insert(module.clone(), file);
            krate.learn_modules(&module, &module, &ast.items);
            parsed.push((module, ast));
        }
        for (module, ast) in &parsed {
            krate.learn_uses(module, &ast.items);
        }
        (krate, parsed)
    }

    /// Records `module` (written in `file`) and its `mod` blocks.
    fn learn_modules(&mut self, file: &ModPath, module: &ModPath, items: &[syn::Item]) {
        self.modules.insert(module.clone(), file.clone());
        for item in items {
            if let syn::Item::Mod(syn::ItemMod {
                ident,
                content: Some((_, items)),
                ..
            }) = item
            {
                let mut child = module.clone();
                child.push(ident.to_string());
                self.learn_modules(file, &child, items);
            }
        }
    }

    /// Records the names `module` and its `mod` blocks bring in with `use`.
    fn learn_uses(&mut self, module: &ModPath, items: &[syn::Item]) {
        for item in items {
            match item {
                syn::Item::Mod(inner) => {
                    if let Some((_, items)) = &inner.content {
                        let mut child = module.clone();
                        child.push(inner.ident.to_string());
                        self.learn_uses(&child, items);
                    }
                }
                syn::Item::Use(item) => {
                    let mut named = Vec::new();
                    expand_use(&item.tree, &mut Vec::new(), &mut named);
                    for (path, name) in named {
                        if let (Some(name), Some(target)) = (name, self.absolute(module, &path)) {
                            self.uses
                                .entry(module.clone())
                                .or_default()
                                .insert(name, target);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// `path` as written in `module`, from the crate's root; `None` for paths
    /// outside the crate (other crates, locals, the prelude).
    fn absolute(&self, module: &ModPath, path: &[String]) -> Option<ModPath> {
        let (first, rest) = path.split_first()?;
        let mut base = module.clone();
        let rest = match first.as_str() {
            "crate" => {
                base.clear();
                rest
            }
            "self" => rest,
            "super" => {
                let mut rest = rest;
                base.pop()?;
                while rest.first().is_some_and(|part| part == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                rest
            }
            _ => {
                let mut child = module.clone();
                child.push(first.clone());
                if self.modules.contains_key(&child) {
                    path
                } else if let Some(target) = self.uses.get(module).and_then(|uses| uses.get(first))
                {
                    base = target.clone();
                    rest
                } else {
                    return None;
                }
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file that defines what `path` (from the root) names, following
    /// re-exports.
    fn file_of(&self, path: &ModPath) -> Option<ModPath> {
        let mut path = path.clone();
        for _ in 0..16 {
            let known = (0..=path.len())
                .rev()
                .find(|&len| self.modules.contains_key(&path[..len]))?;
            let module = path[..known].to_vec();
            let reexport = path
                .get(known)
                .and_then(|name| self.uses.get(&module)?.get(name))
                .filter(|target| !target.starts_with(&path[..=known]));
            match reexport {
                Some(target) => {
                    let mut next = target.clone();
                    next.extend(path[known + 1..].iter().cloned());
                    path = next;
                }
                None => return self.modules.get(&module).cloned(),
            }
        }
        None
    }
}

/// Collects the paths a file names, each with the module it is written in.
struct Names<'a> {
    krate: &'a Crate,
    module: ModPath,
    found: BTreeSet<ModPath>,
}

impl Names<'_> {
    fn name(&mut self, path: &[String]) {
        let target = self.krate.absolute(&self.module, path);
        if let Some(file) = target.and_then(|target| self.krate.file_of(&target)) {
            self.found.insert(file);
        }
    }

    /// `crate::a::b`, `super::a` and `self::a` paths among a macro's tokens.
    fn scan(&mut self, tokens: TokenStream) {
        let mut path: Vec<String> = Vec::new();
        let mut colons = 0;
        for token in tokens {
            match token {
                TokenTree::Ident(ident) => {
                    let ident = ident.to_string();
                    let starts = matches!(ident.as_str(), "crate" | "super" | "self");
                    if colons == 2 && !path.is_empty() {
                        path.push(ident);
                    } else {
                        self.flush(&mut path);
                        if starts {
                            path.push(ident);
                        }
                    }
                    colons = 0;
                }
                TokenTree::Punct(punct) if punct.as_char() == ':' && !path.is_empty() => {
                    colons += 1
                }
                TokenTree::Group(group) => {
                    self.flush(&mut path);
                    self.scan(group.stream());
                    colons = 0;
                }
                _ => {
                    self.flush(&mut path);
                    colons = 0;
                }
            }
        }
        self.flush(&mut path);
    }

    fn flush(&mut self, path: &mut Vec<String>) {
        if path.len() > 1 {
            let taken = std::mem::take(path);
            self.name(&taken);
        }
        path.clear();
    }
}

/// Whether an item is compiled for tests only: test code may reach across
/// the layers (a codec's tests use the shared test helpers), the shipped code
/// may not.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Path>()
                .is_ok_and(|cfg| cfg.is_ident("test"))
    })
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(item) => &item.attrs,
            syn::Item::Fn(item) => &item.attrs,
            syn::Item::Use(item) => &item.attrs,
            syn::Item::Impl(item) => &item.attrs,
            syn::Item::Struct(item) => &item.attrs,
            syn::Item::Const(item) => &item.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_some() {
            self.module.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.module.pop();
        }
    }

    /// A re-export (`pub use`) only passes a name on: the files that use the
    /// name import the file that defines it, and a module's own code that uses
    /// it is seen in its paths.
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if !matches!(item.vis, syn::Visibility::Inherited) {
            return;
        }
        let mut named = Vec::new();
        expand_use(&item.tree, &mut Vec::new(), &mut named);
        for (path, _) in named {
            self.name(&path);
        }
    }

    /// `pub(crate)` and `pub(super)` say who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let parts: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.name(&parts);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.scan(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Which file imports which (module paths of files), self-imports left out.
fn imports() -> (Crate, BTreeMap<ModPath, BTreeSet<ModPath>>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (krate, parsed) = Crate::load(&src);
    let mut graph = BTreeMap::new();
    for (module, ast) in &parsed {
        let mut names = Names {
            krate: &krate,
            module: module.clone(),
            found: BTreeSet::new(),
        };
        names.visit_file(ast);
        names.found.remove(module);
        graph.insert(module.clone(), names.found);
    }
    (krate, graph)
}

fn show(module: &ModPath, krate: &Crate) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    krate.files[module]
        .strip_prefix(src)
        .unwrap()
        .display()
        .to_string()
}

/// Loops of imports: the strongly connected components of more than one file
/// (Tarjan's algorithm).
fn loops(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: HashMap<&'g ModPath, (usize, usize)>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    fn connect<'g>(state: &mut State<'g>, node: &'g ModPath) {
        let order = state.index.len();
        state.index.insert(node, (order, order));
        state.stack.push(node);
        state.on_stack.insert(node);
        for next in state.graph.get(node).into_iter().flatten() {
            if !state.index.contains_key(next) {
                connect(state, next);
                let low = state.index[next].1.min(state.index[node].1);
                state.index.get_mut(node).unwrap().1 = low;
            } else if state.on_stack.contains(next) {
                let low = state.index[next].0.min(state.index[node].1);
                state.index.get_mut(node).unwrap().1 = low;
            }
        }
        let (order, low) = state.index[node];
        if order == low {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member.clone());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            connect(&mut state, node);
        }
    }
    state.found
}

fn layer_of(module: &ModPath) -> Option<usize> {
    let top = module.first()?;
    LAYERS
        .iter()
        .position(|layer| layer.contains(&top.as_str()))
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let (krate, graph) = imports();
    let found: Vec<String> = loops(&graph)
        .iter()
        .map(|files| {
            let edges: Vec<String> = files
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| files.contains(to))
                        .map(|to| format!("  {} imports {}", show(from, &krate), show(to, &krate)))
                })
                .collect();
            format!("a loop of {} files:\n{}", files.len(), edges.join("\n"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import loops between files:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_layer_imports_only_the_layers_below_it() {
    let (krate, graph) = imports();
    let mut wrong = Vec::new();
    for (from, targets) in &graph {
        let Some(from_layer) = layer_of(from) else {
            if !from.is_empty() {
                wrong.push(format!(
                    "{}: a top-level module missing from LAYERS",
                    show(from, &krate)
                ));
            }
            continue;
        };
        for to in targets {
            let to_layer = layer_of(to);
            let same_module = from.first() == to.first();
            if !same_module && to_layer.is_none_or(|to_layer| to_layer < from_layer) {
                wrong.push(format!(
                    "{} imports {}",
                    show(from, &krate),
                    show(to, &krate)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_sees_an_import_and_a_loop() {
    let (krate, graph) = imports();
    let decode = vec!["archive".to_string(), "decode".to_string()];
    assert!(krate.files.contains_key(&decode));
    assert!(
        graph[&decode]
            .iter()
            .any(|to| to.first().is_some_and(|top| top == "dsl")),
        "archive/decode.rs runs programs, so it must be seen importing the language"
    );
    let a = vec!["a".to_string()];
    let b = vec!["b".to_string()];
    let c = vec!["c".to_string()];
    let mut looped = BTreeMap::new();
    looped.insert(a.clone(), BTreeSet::from([b.clone()]));
    looped.insert(b.clone(), BTreeSet::from([c.clone()]));
    looped.insert(c.clone(), BTreeSet::from([a.clone()]));
    assert_eq!(loops(&looped), vec![vec![a.clone(), b.clone(), c.clone()]]);
    looped.get_mut(&c).unwrap().clear();
    assert!(loops(&looped).is_empty());
}
