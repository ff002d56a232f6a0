//! Bounded A* over partial programs.
//!
//! A state is a partial program: the holes expanded so far, each with the
//! operator chosen for it, and the holes still open. Holes live in one arena
//! per search and keep their target stream, leaf completion and candidate
//! operators, so states share them and no pop replays a decomposition from
//! the root.
//!
//! Successors are generated lazily: expanding a state's preferred hole pushes one
//! *pending* state per candidate operator, ordered by `g + h` (`g` sums the prior's
//! costs of the chosen productions, `h` the cheapest production cost of each open
//! hole, which is admissible as each open hole needs at least one production).
//! Popping a pending state *materializes* it (derives the children's streams and
//! their leaves); each pop of either kind spends one unit of budget. Every
//! materialized state has an exact cost, `est`: the encoded length of its program
//! with open holes completed by leaves, plus the decode penalty of its full-pass
//! nodes (see [`super::cost::decode_penalty`]); the cheapest is the
//! incumbent. A byte lower bound prunes states that cannot beat it.
//!
//! The root's own expansion (its children derived and their leaves sized on
//! all threads first) is materialized in full before the budget is spent,
//! except for the operators the prior makes unlikely: those are set
//! aside, and after the search each is materialized unless a lower bound of
//! its children's leaves shows it cannot beat the incumbent. So a learned
//! prior orders the search but never makes its result larger than the
//! root-only search's, which is the search at budget 0 under the uniform
//! prior.

use super::bound::{bounded_children, root_bound, Bounded, MIN_PROGRAM_LEN};
use super::context::{Context, Position};
use super::cost::{decode_penalty, runs_to};
use super::expand::{operators, Operator};
use super::leaf::leaf_among;
use super::options::{Order, SearchLimits, SynthOptions};
use super::prior::Prior;
use super::production::Production;
use super::stream::Hint;
use crate::codec::{Codec, Stats};
use crate::dsl::{self, encoded_len, Literal, Program, Type};
use rayon::prelude::*;
use std::cell::OnceCell;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

/// The result of a search: the program and the productions it is made of, each
/// with the context of its hole (what the prior counts).
pub struct Found {
    pub program: Program<Literal>,
    pub productions: Vec<(Context, Production)>,
}

struct Hole {
    stream: Arc<[u32]>,
    ty: Type,
    pos: Position,
    distinct: Option<usize>,
    /// Computed only when needed: for a learned prior, or to report productions.
    ctx: OnceCell<Context>,
    costs: [f64; Production::ALL.len()],
    /// Cheapest production cost here: the relaxed grammar's completion cost.
    h: f64,
    leaf: Program<Literal>,
    /// The leaf's length as the search weighs it (rANS literals'
    /// predicted), and its exact length, found only for a state that may
    /// become the best.
    leaf_len: usize,
    leaf_exact: OnceCell<usize>,
    /// Candidate operators, derived on first expansion.
    operators: OnceCell<Vec<Operator>>,
}

impl Hole {
    /// The statistics of the hole's words, where its leaf is a literal.
    fn stats(&self) -> Option<Arc<Stats>> {
        match &self.leaf.op {
            dsl::Op::Lit(lit) => Some(lit.stats.clone()),
            _ => None,
        }
    }
}

/// A child's stream with its leaf, before it becomes a hole.
struct Child {
    ty: Type,
    stream: Arc<[u32]>,
    leaf: Program<Literal>,
    distinct: Option<usize>,
}

impl Child {
    /// The child of `stream`, whose statistics are `stats` where known,
    /// its leaf sized with `codecs`.
    fn new(ty: Type, stream: Arc<[u32]>, stats: Option<Stats>, codecs: &[Codec]) -> Child {
        let (leaf, distinct) = leaf_among(codecs, stream.clone(), ty.width, stats);
        Child {
            ty,
            stream,
            leaf,
            distinct,
        }
    }

    /// The children `operator` gives `stream`, of type `ty` (whose
    /// statistics are `parent` where known), if it yields it, with their
    /// leaves (on all threads).
    fn derive(
        operator: &Operator,
        stream: &[u32],
        ty: Type,
        parent: Option<&Stats>,
        codecs: &[Codec],
    ) -> Option<Vec<Child>> {
        let (kids, _) = bounded_children(operator, stream, ty, parent)?;
        Some(Child::sized(kids, operator, stream, ty.width, codecs))
    }

    /// The children bounding `operator` at `stream` (`width`-bit words)
    /// left, with their streams and leaves (on all threads).
    fn sized(
        kids: Bounded,
        operator: &Operator,
        stream: &[u32],
        width: u32,
        codecs: &[Codec],
    ) -> Vec<Child> {
        (kids.into_children(operator, stream, width).into_par_iter())
            .with_max_len(1)
            .map(|(ty, s, stats)| Child::new(ty, s, stats, codecs))
            .collect()
    }
}

/// The root's hole: the first one a search adds.
const ROOT_HOLE: usize = 0;

/// An operator applied to a hole, with its children's holes.
struct Branch {
    children: Vec<usize>,
    /// Encoded bytes of the node itself, without its children, plus its decode
    /// penalty.
    overhead: usize,
}

/// A persistent list of expansion choices, shared between states.
struct Choice {
    hole: usize,
    operator: usize,
    next: Option<Rc<Choice>>,
}

#[derive(Clone)]
struct State {
    choices: Option<Rc<Choice>>,
    open: Vec<usize>,
    g: f64,
    est: usize,
    /// No completion encodes in fewer bytes.
    lb: usize,
}

/// An open-list entry: a materialized state, or one operator applied to a hole of
/// a materialized state, not yet materialized.
enum Node {
    Ready(State),
    Pending {
        parent: Rc<State>,
        hole: usize,
        operator: usize,
    },
}

struct Entry {
    key: f64,
    seq: u64,
    node: Node,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so the max-heap pops the smallest key; ties go to the older entry.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.key.total_cmp(&self.key)).then(other.seq.cmp(&self.seq))
    }
}

/// What one search is configured with: its options and its stream's hint.
struct Setup<'a> {
    hint: Hint,
    prior: &'a Prior,
    order: Order,
    budget: usize,
    min_q: f64,
    limits: SearchLimits,
    leaf_codecs: &'a [Codec],
}

struct Search<'a> {
    setup: &'a Setup<'a>,
    holes: Vec<Hole>,
    /// The root's likely operators' children, derived with their leaves on
    /// all threads before the search takes them (see [`Search::prepare_root`]).
    prepared: HashMap<usize, Option<Vec<Child>>>,
    branches: HashMap<(usize, usize), Rc<Branch>>,
    /// Holes derived and not kept (see [`Search::take_root_within_bounds`]),
    /// and the words of all derived, as the limits count them.
    unkept_holes: usize,
    words: usize,
    max_words: usize,
    /// Whether the limits on holes and words still hold (see [`Search::fits`]).
    bounded: bool,
    heap: BinaryHeap<Entry>,
    seq: u64,
    /// The best state so far and its exact cost (see [`Search::exact_est`]).
    best: State,
    best_exact: usize,
}

/// The bounded A* search alone: the smallest program yielding all of
/// `target` that it finds within `opts`' budget and limits, with the
/// productions it is made of (what a prior counts). A long stream is not
/// sampled, and no Match or Mirror is offered: [`super::search_stream`]
/// does both.
pub fn astar(target: &[u32], width: u32, hint: Hint, opts: &SynthOptions) -> Found {
    let setup = &Setup {
        hint,
        prior: &opts.prior,
        order: opts.order,
        budget: opts.budget,
        min_q: opts.min_q,
        limits: opts.limits,
        leaf_codecs: opts.leaf_codecs,
    };
    let mut s = Search {
        setup,
        holes: Vec::new(),
        prepared: HashMap::new(),
        branches: HashMap::new(),
        unkept_holes: 0,
        words: 0,
        max_words: target.len().saturating_mul(setup.limits.max_words_factor),
        bounded: true,
        heap: BinaryHeap::new(),
        seq: 0,
        best: State {
            choices: None,
            open: Vec::new(),
            g: 0.0,
            est: usize::MAX,
            lb: 0,
        },
        best_exact: usize::MAX,
    };
    let ty = Type {
        width,
        len: target.len(),
    };
    let root = s.add_hole(
        Child::new(ty, target.into(), None, setup.leaf_codecs),
        Position::ROOT,
    );
    let start = s.close_or_keep(State {
        choices: None,
        open: vec![root],
        g: 0.0,
        est: s.holes[root].leaf_len,
        lb: 0,
    });
    s.best_exact = s.exact_est(&start);
    s.best = start.clone();
    let start = Rc::new(start);
    let (likely, unlikely): (Vec<usize>, Vec<usize>) =
        (0..s.operators(root).len()).partition(|&operator| s.is_likely(root, operator));
    match setup.budget {
        0 => s.take_root_within_bounds(&start, root, &likely),
        _ => {
            s.prepare_root(root, &likely);
            for operator in likely {
                if let Some(state) = s.materialize(&start, root, operator) {
                    s.consider(state);
                }
            }
        }
    }
    let mut left = setup.budget;
    while left > 0 {
        let Some(entry) = s.heap.pop() else { break };
        // Both kinds of pop cost work (deriving a hole's operators, or its children's
        // streams and leaves), so both spend budget; pruned entries do not.
        match entry.node {
            Node::Ready(state) if state.lb < s.best.est => {
                left -= 1;
                s.expand(state);
            }
            Node::Pending {
                parent,
                hole,
                operator,
            } if parent.lb < s.best.est => {
                left -= 1;
                if let Some(state) = s.materialize(&parent, hole, operator) {
                    s.consider(state);
                }
            }
            _ => {}
        }
    }
    let (stream, ty, all) = (&s.holes[root].stream, s.holes[root].ty, s.operators(root));
    let stats = s.holes[root].stats();
    let bounds: Vec<usize> = (unlikely.par_iter().with_max_len(1))
        .map(|&operator| root_bound(&all[operator], stream, ty, stats.as_deref()))
        .collect();
    // Those that may win are derived at once, on all threads, as the likely
    // ones were, and taken in order below: each one's children take as long
    // as a likely operator's, and the prior set them aside as seldom winning,
    // so the best seldom moves while they are taken. (One whose bound the
    // best passes meanwhile is derived for nothing; the program found is
    // the same.)
    let may_win: Vec<usize> = (unlikely.iter().zip(&bounds))
        .filter(|&(_, &bound)| bound < s.best.est)
        .map(|(&operator, _)| operator)
        .collect();
    // The budget may have filled the search's bounds: the operators set aside
    // are derived whatever the search holds, or a prior could make the
    // result worse than the root-only search's, and a larger budget worse
    // than a smaller one (a Match's literal runs could lose the Scan a
    // smaller budget gives them). What they hold is still bounded: a few
    // streams of the target's length per root operator, and no state is
    // expanded after them.
    s.bounded = false;
    s.prepare_root(root, &may_win);
    for (operator, bound) in unlikely.into_iter().zip(bounds) {
        if bound < s.best.est {
            if let Some(state) = s.materialize(&start, root, operator) {
                s.consider(state);
            }
        }
    }
    s.finish(target)
}

/// The holes and the words a branch of `op` at a hole of type `ty` adds (a
/// Repeat's child is a fraction of its stream: counted as none).
fn branch_size(op: &Operator, ty: Type) -> (usize, usize) {
    let words = match op {
        Operator::Repeat { .. } => 0,
        _ => ty.len,
    };
    (op.arity(ty.width), words)
}

/// The operator chosen at each expanded hole of `state`.
fn chosen(state: &State) -> HashMap<usize, usize> {
    let mut chosen = HashMap::new();
    let mut c = state.choices.as_deref();
    while let Some(choice) = c {
        chosen.insert(choice.hole, choice.operator);
        c = choice.next.as_deref();
    }
    chosen
}

impl Search<'_> {
    fn add_hole(&mut self, child: Child, pos: Position) -> usize {
        let Child {
            ty: Type { width, .. },
            stream,
            leaf,
            distinct,
        } = child;
        let ctx = OnceCell::new();
        let prior = self.setup.prior;
        let costs = if prior.is_uniform() {
            Prior::UNIFORM_COSTS
        } else {
            let c = Context::new(&stream, width, distinct, pos, self.setup.hint);
            ctx.get_or_init(|| c);
            prior.costs(c)
        };
        self.words += stream.len();
        self.holes.push(Hole {
            ty: Type {
                width,
                len: stream.len(),
            },
            stream,
            pos,
            distinct,
            ctx,
            h: costs.iter().copied().fold(f64::INFINITY, f64::min),
            costs,
            leaf_len: encoded_len(&leaf),
            leaf_exact: OnceCell::new(),
            leaf,
            operators: OnceCell::new(),
        });
        self.holes.len() - 1
    }

    fn context(&self, hole: usize) -> Context {
        let h = &self.holes[hole];
        *h.ctx
            .get_or_init(|| Context::new(&h.stream, h.ty.width, h.distinct, h.pos, self.setup.hint))
    }

    /// Candidate operators of `hole`: below the root, those of the likely
    /// productions (see [`Self::likely`]); at the root, all of them.
    fn operators(&self, hole: usize) -> &[Operator] {
        let h = &self.holes[hole];
        h.operators.get_or_init(|| {
            if h.pos.depth >= self.setup.limits.max_depth {
                return Vec::new();
            }
            let root = h.pos.depth == 0;
            let allowed = |p: Production| root || self.likely(hole, p);
            operators(
                &h.stream,
                h.ty.width,
                self.setup.hint,
                h.pos.parent,
                &allowed,
            )
        })
    }

    /// Whether the prior gives `p` at least `min_q` at `hole`; Repeat,
    /// Concat, Palette and Scaled always are, whenever the target has the structure they need
    /// (they are rare, decisive and cheap to detect, so a sample may never
    /// show them).
    fn likely(&self, hole: usize, p: Production) -> bool {
        matches!(
            p,
            Production::Repeat | Production::Concat | Production::Palette | Production::Scaled
        ) || (-self.holes[hole].costs[p.index()]).exp2() >= self.setup.min_q
    }

    fn is_likely(&self, hole: usize, operator: usize) -> bool {
        self.likely(hole, self.operators(hole)[operator].production())
    }

    /// The branch of `operator` at `hole`, deriving its children's holes once; None
    /// when the limits forbid more holes, or the operator does not yield the
    /// hole's stream.
    fn branch(&mut self, hole: usize, operator: usize) -> Option<Rc<Branch>> {
        if let Some(b) = self.branches.get(&(hole, operator)) {
            return Some(b.clone());
        }
        let h = &self.holes[hole];
        let (ty, pos, stream) = (h.ty, h.pos, h.stream.clone());
        let op = self.operators(hole)[operator].clone();
        let (holes, words) = branch_size(&op, ty);
        if !self.fits(holes, words) {
            return None;
        }
        let parent = Some(op.production());
        // An operator proposed from part of the stream may not yield all of it.
        let prepared = match hole {
            ROOT_HOLE => self.prepared.remove(&operator),
            _ => None,
        };
        let kids = match prepared {
            Some(kids) => kids?,
            None => {
                let stats = self.holes[hole].stats();
                Child::derive(&op, &stream, ty, stats.as_deref(), self.setup.leaf_codecs)?
            }
        };
        let children: Vec<usize> = (kids.into_iter().enumerate())
            .map(|(child, kid)| {
                let depth = pos.depth + 1;
                let pos = Position {
                    parent,
                    child,
                    depth,
                };
                self.add_hole(kid, pos)
            })
            .collect();
        let leaves: Vec<_> = children
            .iter()
            .map(|&c| self.holes[c].leaf.clone())
            .collect();
        let kids_len: usize = children.iter().map(|&c| self.holes[c].leaf_len).sum();
        let penalty = decode_penalty(op.production(), ty);
        let overhead = encoded_len(&op.build(ty, leaves)) - kids_len + penalty;
        let b = Rc::new(Branch { children, overhead });
        self.branches.insert((hole, operator), b.clone());
        Some(b)
    }

    /// Derives the children of the root's `operators` and their leaves, on all
    /// threads: the root's expansion is most of a search's work, and a
    /// search may be all a thread has to do. The search then takes them in
    /// its own order, as it would have derived them.
    /// Only the operators the limits let in, taken in order, are: their
    /// children's words stay within the search's bound.
    fn prepare_root(&mut self, root: usize, operators: &[usize]) {
        let h = &self.holes[root];
        let (stream, ty, all) = (&h.stream, h.ty, self.operators(root));
        let stats = h.stats();
        let (mut holes, mut words) = (0, 0);
        let within: Vec<usize> = (operators.iter().copied())
            .take_while(|&operator| {
                let (h, w) = branch_size(&all[operator], ty);
                (holes, words) = (holes + h, words + w);
                self.fits(holes, words)
            })
            .collect();
        let codecs = self.setup.leaf_codecs;
        let prepared: Vec<Option<Vec<Child>>> = (within.par_iter().with_max_len(1))
            .map(|&operator| Child::derive(&all[operator], stream, ty, stats.as_deref(), codecs))
            .collect();
        self.prepared.extend(within.into_iter().zip(prepared));
    }

    /// The root's `operators` taken in order by a search of budget 0, which
    /// expands nothing after them: only the best so far matters, which a
    /// state is taken as only if it weighs no more (see
    /// [`Search::consider`]), so the leaves of an operator whose bound (see
    /// [`bounded_children`]) exceeds the best's weight are never sized. The
    /// bounds are found on all threads first, as [`Search::prepare_root`]
    /// derives children; sizing leaves (predicting rANS literals, limiting
    /// Huffman codes) is most of what a root operator costs.
    fn take_root_within_bounds(&mut self, start: &Rc<State>, root: usize, operators: &[usize]) {
        let h = &self.holes[root];
        let (stream, ty, all) = (&h.stream, h.ty, self.operators(root));
        let stats = h.stats();
        let bounded: Vec<_> = (operators.par_iter().with_max_len(1))
            .map(|&operator| bounded_children(&all[operator], stream, ty, stats.as_deref()))
            .collect();
        let codecs = self.setup.leaf_codecs;
        for (&operator, bounded) in operators.iter().zip(bounded) {
            let (holes, words) = branch_size(&self.operators(root)[operator], ty);
            // As `branch` finds, an operator beyond the limits is not taken.
            let Some((kids, bound)) = bounded.filter(|_| self.fits(holes, words)) else {
                continue;
            };
            if bound > self.best.est {
                // Its children count against the limits as if they were
                // kept, so that the operators after it are taken as they
                // would have been.
                let (holes, words) = kids.size();
                self.unkept_holes += holes;
                self.words += words;
                continue;
            }
            let stream = &self.holes[root].stream;
            let children = Child::sized(
                kids,
                &self.operators(root)[operator],
                stream,
                ty.width,
                codecs,
            );
            self.prepared.insert(operator, Some(children));
            if let Some(state) = self.materialize(start, root, operator) {
                self.consider(state);
            }
        }
    }

    /// Whether the limits let in `holes` more holes holding `words` more words.
    fn fits(&self, holes: usize, words: usize) -> bool {
        !self.bounded
            || (self.holes.len() + self.unkept_holes + holes <= self.setup.limits.max_holes
                && self.words + words <= self.max_words)
    }

    /// `parent` with `hole` expanded by its `operator`-th candidate.
    fn materialize(&mut self, parent: &State, hole: usize, operator: usize) -> Option<State> {
        let b = self.branch(hole, operator)?;
        let h = &self.holes[hole];
        let production = self.operators(hole)[operator].production();
        let mut open: Vec<usize> = parent.open.iter().copied().filter(|&k| k != hole).collect();
        open.extend(&b.children);
        let kids: usize = b.children.iter().map(|&c| self.holes[c].leaf_len).sum();
        let state = State {
            choices: Some(Rc::new(Choice {
                hole,
                operator,
                next: parent.choices.clone(),
            })),
            open,
            g: parent.g + h.costs[production.index()],
            est: parent.est - h.leaf_len + b.overhead + kids,
            lb: 0,
        };
        Some(self.close_or_keep(state))
    }

    /// Closes holes that cannot be expanded (constants, depth limit) and sets the
    /// lower bound.
    fn close_or_keep(&self, mut state: State) -> State {
        state.open.retain(|&k| self.expandable(k));
        let open: usize = (state.open.iter())
            .map(|&k| self.holes[k].leaf_len - MIN_PROGRAM_LEN)
            .sum();
        state.lb = state.est - open;
        state
    }

    /// Whether a hole may have operators (without deriving them).
    fn expandable(&self, hole: usize) -> bool {
        let h = &self.holes[hole];
        h.pos.depth < self.setup.limits.max_depth && !matches!(h.leaf.op, crate::dsl::Op::Const(_))
    }

    fn h(&self, state: &State) -> f64 {
        state.open.iter().map(|&k| self.holes[k].h).sum()
    }

    fn push(&mut self, key: f64, node: Node) {
        if self.heap.len() < self.setup.limits.max_open {
            self.seq += 1;
            self.heap.push(Entry {
                key,
                seq: self.seq,
                node,
            });
        }
    }

    /// Takes `state` as the best if it weighs no more than the best and is
    /// exactly smaller: the best only ever gets exactly smaller, so a larger
    /// budget, which considers the same states first and more after, never
    /// ends with a larger program; and it is never exactly larger than a
    /// state of the least weight considered. Keeps `state` to expand if it
    /// has holes left and could still beat the best.
    fn consider(&mut self, state: State) {
        if state.est <= self.best.est {
            let exact = self.exact_est(&state);
            if exact < self.best_exact {
                self.best = state.clone();
                self.best_exact = exact;
            }
        }
        if !state.open.is_empty() && state.lb < self.best.est {
            let key = match self.setup.order {
                Order::AStar => state.g + self.h(&state),
                Order::EstimatedSize => state.est as f64,
            };
            self.push(key, Node::Ready(state));
        }
    }

    /// Pushes the pending expansions of the preferred hole of `state`, and the
    /// state with that hole closed by its leaf.
    fn expand(&mut self, state: State) {
        let hole = self.preferred_hole(&state);
        let rest: Vec<usize> = state.open.iter().copied().filter(|&k| k != hole).collect();
        let h = &self.holes[hole];
        let (costs, hole_h, width) = (h.costs, h.h, h.ty.width);
        let operators: Vec<(f64, usize)> = (self.operators(hole).iter())
            .map(|s| (costs[s.production().index()], s.arity(width)))
            .collect();
        let base_h = self.h(&state) - hole_h;
        let parent = Rc::new(state);
        for (operator, (cost, arity)) in operators.into_iter().enumerate() {
            // Children's own h is unknown until materialized; the smallest cost
            // any production has anywhere keeps the estimate admissible.
            let key = match self.setup.order {
                Order::AStar => parent.g + cost + base_h + arity as f64 * self.min_cost(),
                Order::EstimatedSize => parent.est as f64,
            };
            let node = Node::Pending {
                parent: parent.clone(),
                hole,
                operator,
            };
            self.push(key, node);
        }
        if !rest.is_empty() {
            let leaf = Production::of_leaf(&self.holes[hole].leaf.op);
            let closed = self.close_or_keep(State {
                choices: parent.choices.clone(),
                open: rest,
                g: parent.g + costs[leaf.index()],
                est: parent.est,
                lb: 0,
            });
            self.consider(closed);
        }
    }

    fn min_cost(&self) -> f64 {
        if self.setup.prior.is_uniform() {
            Prior::UNIFORM_COSTS[0]
        } else {
            0.0
        }
    }

    /// The open hole holding the most bytes (ties: the oldest).
    fn preferred_hole(&self, state: &State) -> usize {
        *state
            .open
            .iter()
            .max_by_key(|&&k| (self.holes[k].leaf_len, std::cmp::Reverse(k)))
            .expect("open states have holes")
    }

    /// `state`'s [`State::est`] with the leaves that close its holes sized
    /// exactly (each hole's once).
    fn exact_est(&self, state: &State) -> usize {
        let chosen = chosen(state);
        let mut est = state.est as i128;
        let mut holes = vec![0];
        while let Some(hole) = holes.pop() {
            match chosen.get(&hole) {
                Some(&operator) => holes.extend(&self.branches[&(hole, operator)].children),
                None => {
                    let h = &self.holes[hole];
                    let exact = *h.leaf_exact.get_or_init(|| dsl::exact_len(&h.leaf));
                    est += exact as i128 - h.leaf_len as i128;
                }
            }
        }
        est as usize
    }

    /// Builds the best state's program (open holes completed by leaves),
    /// checks that it yields the target, and lists its productions.
    fn finish(&self, target: &[u32]) -> Found {
        let chosen = chosen(&self.best);
        let mut productions = Vec::new();
        let program = self.build(0, &chosen, &mut productions);
        if runs_to(&program, target) {
            return Found {
                program,
                productions,
            };
        }
        log::error!("synthesized program does not reproduce its target; storing a literal");
        let root = &self.holes[0];
        Found {
            program: root.leaf.clone(),
            productions: vec![(self.context(0), Production::of_leaf(&root.leaf.op))],
        }
    }

    fn build(
        &self,
        hole: usize,
        chosen: &HashMap<usize, usize>,
        productions: &mut Vec<(Context, Production)>,
    ) -> Program<Literal> {
        let h = &self.holes[hole];
        let Some(&operator) = chosen.get(&hole) else {
            productions.push((self.context(hole), Production::of_leaf(&h.leaf.op)));
            return h.leaf.clone();
        };
        let op = &self.operators(hole)[operator];
        productions.push((self.context(hole), op.production()));
        let branch = &self.branches[&(hole, operator)];
        let kids = (branch.children.iter())
            .map(|&c| self.build(c, chosen, productions))
            .collect();
        op.build(h.ty, kids)
    }
}
