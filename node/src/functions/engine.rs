//! The sandbox one function invocation runs in: a fresh QuickJS runtime and context (through
//! `rquickjs`) on the calling thread, with a memory limit, a stack limit and a wall-clock
//! deadline that interrupts running code, and nothing of the host but what `Host` offers (the
//! data API, timers, `console`). Nothing survives the invocation: no state is shared between
//! invocations or apps (decisions/0023).
//!
//! The script's promises are driven here: JavaScript jobs run until the function's promise
//! settles; while it waits on the host, this thread blocks on the answers of the calls it made,
//! which run as futures on the node's async runtime (`Host::call`). `functions::runner` decides
//! on which thread this runs; `functions::host` is the node's `Host`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rquickjs::context::EvalOptions;
use rquickjs::function::Rest;
use rquickjs::promise::PromiseState;
use rquickjs::{CatchResultExt, CaughtError, Context, Ctx, Function, Promise, Runtime, Value};
use serde_json::Value as Json;

/// The limits of one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall time from start to the settled promise, waits on the host included.
    pub wall: Duration,
    /// The JavaScript heap.
    pub memory_bytes: usize,
    /// The interpreter's stack (recursion depth).
    pub stack_bytes: usize,
    /// Invocations of the app's functions a node runs at once (`None`: the node's default
    /// share, `runner::Runner`).
    pub concurrency: Option<usize>,
}

/// An error the script threw or the host answered: a code (`Basalt.Error`'s, or none for a
/// plain `throw`) and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thrown {
    pub code: Option<i64>,
    pub message: String,
    /// Made by the function's own code (`throw new Basalt.Error(code, …)`, or any throw), not
    /// a host call's refusal or a check of the data API's arguments that it did not catch: a
    /// directly called function fails with its own error's code, else 310.
    pub own: bool,
}

/// Why an invocation gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The source does not compile.
    #[error("the function does not compile: {0}")]
    Compile(String),
    /// The script threw (or its promise was rejected).
    #[error("{}", .0.message)]
    Thrown(Thrown),
    /// The wall-time limit passed.
    #[error("the function ran longer than its limit of {0:?}")]
    Timeout(Duration),
    /// The heap limit was reached.
    #[error("the function ran out of memory (limit {} MiB)", .0 >> 20)]
    OutOfMemory(usize),
    /// The stack limit was reached.
    #[error("the function's calls nested deeper than its stack allows")]
    StackOverflow,
    /// The function's promise can never settle: it awaits nothing the host will answer.
    #[error("the function's promise never settles (it awaits nothing that can answer)")]
    NeverSettles,
    /// The caller went away (or the node is stopping).
    #[error("the invocation was cancelled")]
    Cancelled,
    /// No slot freed up for it within its wall time (`runner`).
    #[error("too many functions are running on this node; try again shortly")]
    Busy,
    /// Functions called each other (or wrote through triggers) too deep (`runner`).
    #[error("functions called each other (or wrote through triggers) too deep")]
    TooDeep,
    /// The engine itself failed (not the script).
    #[error("the JavaScript engine failed: {0}")]
    Engine(String),
}

/// Severity of a `console` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Log,
    Warn,
    Error,
}

/// The answer of one host call: a JSON value, or an error the script sees as a rejection.
pub type HostFuture = Pin<Box<dyn Future<Output = Result<Json, Thrown>> + Send>>;

/// What the script may ask of the node.
pub trait Host: Send + Sync {
    /// Starts the call `op` with `args` (the data API, timers); its answer settles the
    /// script's promise.
    fn call(&self, op: &str, args: Json) -> HostFuture;
    /// A `console` line of the script.
    fn log(&self, level: LogLevel, line: &str);
}

/// How many `console` lines an invocation may write, and how long each may be.
const LOG_LINES: usize = 100;
const LOG_LINE_BYTES: usize = 2_000;
/// The longest a script may hold host calls open at once.
const HOST_CALLS_IN_FLIGHT: usize = 64;

/// What runs: the source of the function, and the script set up before it.
pub struct Program<'a> {
    /// The script every invocation evaluates first (the `Basalt` API over `__host`).
    pub prelude: &'a str,
    /// The function's name (file name in stack traces).
    pub name: &'a str,
    /// The body of an async function of `request`.
    pub body: &'a str,
}

/// Checks that `body` compiles as the body of an async function, without running any of it:
/// the `AsyncFunction` constructor parses it as exactly one function body (a body that tries
/// to close the wrapper `wrap` puts around it is a syntax error there), under a deadline.
pub fn check_compiles(name: &str, body: &str) -> Result<(), RunError> {
    let rt = Runtime::new().map_err(|e| RunError::Engine(e.to_string()))?;
    rt.set_memory_limit(64 << 20);
    rt.set_max_stack_size(512 << 10);
    let deadline = Instant::now() + Duration::from_secs(5);
    rt.set_interrupt_handler(Some(Box::new(move || Instant::now() >= deadline)));
    let ctx = Context::full(&rt).map_err(|e| RunError::Engine(e.to_string()))?;
    ctx.with(|ctx| {
        let constructor: rquickjs::Result<Function> =
            ctx.eval("(async function () {}).constructor");
        let constructor = constructor.map_err(|e| RunError::Engine(e.to_string()))?;
        let r: rquickjs::Result<Value> = constructor.call(("request", body));
        r.catch(&ctx)
            .map(|_| ())
            .map_err(|e| RunError::Compile(format!("{name}: {}", caught_message(&e))))
    })
}

fn wrap(body: &str) -> String {
    // The body's own lines keep their numbers: the wrapper's head is on line 1 with them.
    format!("(async function (request) {{ {body}\n}})")
}

fn options(name: &str) -> EvalOptions {
    let mut o = EvalOptions::default();
    o.global = true;
    o.strict = false;
    o.promise = false;
    o.filename = Some(format!("{name}.js"));
    o
}

/// Runs `program` with `request` as its argument; answers what its promise resolves to (as
/// JSON: `undefined` is `null`). Blocks the calling thread until done; host calls run on
/// `runtime`. `cancel` stops it early.
pub fn run(
    program: &Program<'_>,
    request: &Json,
    limits: Limits,
    host: Arc<dyn Host>,
    runtime: &tokio::runtime::Handle,
    cancel: Arc<AtomicBool>,
) -> Result<Json, RunError> {
    let started = Instant::now();
    let deadline = started + limits.wall;
    let rt = Runtime::new().map_err(|e| RunError::Engine(e.to_string()))?;
    rt.set_memory_limit(limits.memory_bytes);
    rt.set_max_stack_size(limits.stack_bytes);
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let (cancel, interrupted) = (cancel.clone(), interrupted.clone());
        rt.set_interrupt_handler(Some(Box::new(move || {
            let stop = cancel.load(Ordering::Relaxed) || Instant::now() >= deadline;
            if stop {
                interrupted.store(true, Ordering::Relaxed);
            }
            stop
        })));
    }
    let context = Context::full(&rt).map_err(|e| RunError::Engine(e.to_string()))?;
    let outcome = context.with(|ctx| {
        let mut tasks = Tasks::new(runtime.clone());
        let settlers: Settlers = Rc::new(RefCell::new(HashMap::new()));
        let run = Run {
            ctx: &ctx,
            host: &host,
            settlers: &settlers,
            deadline,
            cancel: &cancel,
        };
        let r = drive(run, program, request, &mut tasks);
        tasks.abort_all();
        // On every exit: the JavaScript functions Rust holds would otherwise outlive the
        // runtime (QuickJS aborts the process on objects left at its end).
        settlers.borrow_mut().clear();
        r
    });
    // Why an interrupted script stopped is the limit's, not the exception it saw.
    let outcome = match outcome {
        Err(_) | Ok(_) if cancel.load(Ordering::Relaxed) => Err(RunError::Cancelled),
        Err(RunError::Thrown(_)) | Err(RunError::Engine(_))
            if interrupted.load(Ordering::Relaxed) || Instant::now() >= deadline =>
        {
            Err(RunError::Timeout(limits.wall))
        }
        Err(RunError::Thrown(t)) if is_out_of_memory(&t.message) => {
            Err(RunError::OutOfMemory(limits.memory_bytes))
        }
        Err(RunError::Thrown(t)) if is_stack_overflow(&t.message) => Err(RunError::StackOverflow),
        Err(RunError::Timeout(_)) => Err(RunError::Timeout(limits.wall)),
        other => other,
    };
    drop(context);
    drop(rt);
    outcome
}

fn is_out_of_memory(message: &str) -> bool {
    message.contains("out of memory")
}

fn is_stack_overflow(message: &str) -> bool {
    message.contains("stack overflow") || message.contains("call stack size exceeded")
}

/// Host calls in flight: the script's resolve/reject functions by call id, and the tasks
/// that answer them.
struct Tasks {
    runtime: tokio::runtime::Handle,
    sender: mpsc::Sender<(u64, Result<Json, Thrown>)>,
    receiver: mpsc::Receiver<(u64, Result<Json, Thrown>)>,
    running: HashMap<u64, tokio::task::AbortHandle>,
}

impl Tasks {
    fn new(runtime: tokio::runtime::Handle) -> Self {
        let (sender, receiver) = mpsc::channel();
        Tasks {
            runtime,
            sender,
            receiver,
            running: HashMap::new(),
        }
    }

    fn abort_all(&mut self) {
        for (_, t) in self.running.drain() {
            t.abort();
        }
    }
}

/// The resolve and reject functions of the promises of host calls in flight, by call id.
type Settlers<'js> = Rc<RefCell<HashMap<u64, (Function<'js>, Function<'js>)>>>;
/// Host calls the script made that the loop has yet to start: id, op, args.
type Started = Rc<RefCell<Vec<(u64, String, Json)>>>;

/// One invocation while it runs: its context, the node as its host, the promises of its host
/// calls in flight, its deadline and its caller's cancel flag.
#[derive(Clone, Copy)]
struct Run<'a, 'js> {
    ctx: &'a Ctx<'js>,
    host: &'a Arc<dyn Host>,
    settlers: &'a Settlers<'js>,
    deadline: Instant,
    cancel: &'a AtomicBool,
}

fn drive(
    run: Run<'_, '_>,
    program: &Program<'_>,
    request: &Json,
    tasks: &mut Tasks,
) -> Result<Json, RunError> {
    let Run {
        ctx,
        host,
        settlers,
        ..
    } = run;
    let started: Started = Rc::new(RefCell::new(Vec::new()));
    install_globals(ctx, host, settlers, &started).map_err(|e| engine(ctx, e))?;
    let prelude: rquickjs::Result<Value> =
        ctx.eval_with_options(program.prelude, options("basalt-prelude"));
    prelude
        .catch(ctx)
        .map_err(|e| RunError::Engine(caught_message(&e)))?;
    let function: Function = ctx
        .eval_with_options::<Value, _>(wrap(program.body), options(program.name))
        .catch(ctx)
        .map_err(|e| RunError::Compile(caught_message(&e)))?
        .into_function()
        .ok_or_else(|| RunError::Engine("the wrapped source is not a function".into()))?;
    let argument = json_to_js(ctx, request)?;
    let result: Value = function
        .call((argument,))
        .catch(ctx)
        .map_err(|e| thrown(ctx, &e))?;
    let promise = match result.clone().into_promise() {
        Some(p) => p,
        None => return js_to_json(ctx, result),
    };
    settle(run, &promise, &started, tasks)
}

fn settle<'js>(
    run: Run<'_, 'js>,
    promise: &Promise<'js>,
    started: &Started,
    tasks: &mut Tasks,
) -> Result<Json, RunError> {
    let Run {
        ctx,
        host,
        settlers,
        deadline,
        cancel,
    } = run;
    loop {
        while ctx.execute_pending_job() {
            if Instant::now() >= deadline {
                return Err(RunError::Timeout(Duration::ZERO));
            }
        }
        // Calls the jobs made: start them on the async runtime.
        for (id, op, args) in started.borrow_mut().drain(..) {
            let sender = tasks.sender.clone();
            let call = host.call(&op, args);
            let task = tasks.runtime.spawn(async move {
                let _ = sender.send((id, call.await));
            });
            tasks.running.insert(id, task.abort_handle());
        }
        match promise.state() {
            PromiseState::Resolved => {
                let v: Value = promise
                    .result::<Value>()
                    .unwrap_or_else(|| Ok(Value::new_undefined(ctx.clone())))
                    .catch(ctx)
                    .map_err(|e| thrown(ctx, &e))?;
                return js_to_json(ctx, v);
            }
            PromiseState::Rejected => {
                let e = promise
                    .result::<Value>()
                    .map(|r| r.catch(ctx))
                    .and_then(Result::err);
                return Err(match e {
                    Some(e) => thrown(ctx, &e),
                    None => RunError::Engine("rejected without a reason".into()),
                });
            }
            PromiseState::Pending => {}
        }
        if tasks.running.is_empty() {
            return Err(RunError::NeverSettles);
        }
        // Wait for an answer, looking at the caller now and then.
        let (id, answer) = loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(RunError::Cancelled);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RunError::Timeout(Duration::ZERO));
            }
            let wait = (deadline - now).min(Duration::from_millis(50));
            match tasks.receiver.recv_timeout(wait) {
                Ok(a) => break a,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(RunError::Engine("host calls' channel closed".into()))
                }
            }
        };
        tasks.running.remove(&id);
        let Some((resolve, reject)) = settlers.borrow_mut().remove(&id) else {
            continue;
        };
        let settled = match answer {
            Ok(v) => {
                let v = json_to_js(ctx, &v)?;
                resolve.call::<_, ()>((v,))
            }
            Err(t) => {
                let e = error_value(ctx, &t).map_err(|e| engine(ctx, e))?;
                reject.call::<_, ()>((e,))
            }
        };
        settled.catch(ctx).map_err(|e| thrown(ctx, &e))?;
    }
}

/// `__host(op, args)` (a promise of the call's answer) and `console`.
fn install_globals<'js>(
    ctx: &Ctx<'js>,
    host: &Arc<dyn Host>,
    settlers: &Settlers<'js>,
    started: &Started,
) -> rquickjs::Result<()> {
    let globals = ctx.globals();
    let next_id = Rc::new(Cell::new(0u64));
    let (settlers, started) = (settlers.clone(), started.clone());
    let call = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, op: String, args: Value<'js>| -> rquickjs::Result<Promise<'js>> {
            if settlers.borrow().len() >= HOST_CALLS_IN_FLIGHT {
                return Err(rquickjs::Exception::throw_range(
                    &ctx,
                    "too many data calls in flight at once",
                ));
            }
            let args = match ctx.json_stringify(args)? {
                Some(s) => serde_json::from_str(&s.to_string()?).unwrap_or(Json::Null),
                None => Json::Null,
            };
            let (promise, resolve, reject) = ctx.promise()?;
            let id = next_id.get();
            next_id.set(id + 1);
            settlers.borrow_mut().insert(id, (resolve, reject));
            started.borrow_mut().push((id, op, args));
            Ok(promise)
        },
    )?;
    globals.set("__host", call)?;
    let console = rquickjs::Object::new(ctx.clone())?;
    let lines = Rc::new(Cell::new(0usize));
    for (name, level) in [
        ("log", LogLevel::Log),
        ("info", LogLevel::Log),
        ("debug", LogLevel::Log),
        ("warn", LogLevel::Warn),
        ("error", LogLevel::Error),
    ] {
        let (host, lines) = (host.clone(), lines.clone());
        let f = Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, args: Rest<Value<'js>>| -> rquickjs::Result<()> {
                if lines.get() >= LOG_LINES {
                    return Ok(());
                }
                lines.set(lines.get() + 1);
                let mut line = String::new();
                for (i, a) in args.0.into_iter().enumerate() {
                    if i > 0 {
                        line.push(' ');
                    }
                    line.push_str(&display(&ctx, a));
                    if line.len() > LOG_LINE_BYTES {
                        break;
                    }
                }
                if line.len() > LOG_LINE_BYTES {
                    let mut cut = LOG_LINE_BYTES;
                    while !line.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    line.truncate(cut);
                    line.push('…');
                }
                host.log(level, &line);
                Ok(())
            },
        )?;
        console.set(name, f)?;
    }
    globals.set("console", console)?;
    Ok(())
}

/// How `console.log` shows a value: strings as they are, others as JSON (or their `String`).
fn display<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> String {
    if let Some(s) = v.as_string() {
        return s.to_string().unwrap_or_default();
    }
    if v.is_error() || v.is_function() || v.is_undefined() || v.is_symbol() {
        return to_string(ctx, v);
    }
    match ctx.json_stringify(v.clone()) {
        Ok(Some(s)) => s.to_string().unwrap_or_default(),
        _ => to_string(ctx, v),
    }
}

fn to_string<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> String {
    let _ = ctx;
    rquickjs::Coerced::<String>::from_js(ctx, v)
        .map(|s| s.0)
        .unwrap_or_default()
}

use rquickjs::FromJs;

fn json_to_js<'js>(ctx: &Ctx<'js>, v: &Json) -> Result<Value<'js>, RunError> {
    ctx.json_parse(v.to_string())
        .catch(ctx)
        .map_err(|e| thrown(ctx, &e))
}

fn js_to_json<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> Result<Json, RunError> {
    let text = ctx
        .json_stringify(v)
        .catch(ctx)
        .map_err(|e| thrown(ctx, &e))?;
    match text {
        None => Ok(Json::Null),
        Some(s) => {
            let s = s.to_string().map_err(|e| engine(ctx, e))?;
            serde_json::from_str(&s).map_err(|e| {
                RunError::Thrown(Thrown {
                    code: None,
                    message: format!("the function's result is not valid JSON: {e}"),
                    own: false,
                })
            })
        }
    }
}

/// A `Basalt.Error` (an `Error` with a numeric `code`) for a host call's rejection.
fn error_value<'js>(ctx: &Ctx<'js>, t: &Thrown) -> rquickjs::Result<Value<'js>> {
    let make: Function = ctx.globals().get("__error")?;
    make.call((t.code, t.message.as_str()))
}

fn thrown<'js>(ctx: &Ctx<'js>, e: &CaughtError<'js>) -> RunError {
    let _ = ctx;
    match e {
        CaughtError::Error(rquickjs::Error::Allocation) => RunError::Thrown(Thrown {
            code: None,
            message: "out of memory".into(),
            own: false,
        }),
        CaughtError::Error(e) => RunError::Engine(e.to_string()),
        CaughtError::Exception(x) => {
            let o: &rquickjs::Object = x.as_object();
            RunError::Thrown(Thrown {
                code: o.get::<_, Option<i64>>("code").ok().flatten(),
                message: x.message().unwrap_or_else(|| "error".into()),
                own: !from_host(o),
            })
        }
        CaughtError::Value(v) => {
            let code = v
                .as_object()
                .and_then(|o| o.get::<_, Option<i64>>("code").ok().flatten());
            let message = v
                .as_object()
                .and_then(|o| o.get::<_, Option<String>>("message").ok().flatten())
                .or_else(|| v.as_string().and_then(|s| s.to_string().ok()))
                .unwrap_or_else(|| format!("{:?}", v.type_of()));
            let own = !v.as_object().is_some_and(from_host);
            RunError::Thrown(Thrown { code, message, own })
        }
    }
}

/// Whether an error object was made by the prelude for a host call's refusal or a data API
/// argument check (it carries a hidden `__host` mark), not by the function's own code.
fn from_host(o: &rquickjs::Object<'_>) -> bool {
    o.get::<_, Option<bool>>("__host").ok().flatten() == Some(true)
}

fn caught_message(e: &CaughtError<'_>) -> String {
    match e {
        CaughtError::Exception(x) => {
            let m = x.message().unwrap_or_default();
            match x.stack() {
                Some(s) if !s.is_empty() => format!("{m}\n{s}"),
                _ => m,
            }
        }
        CaughtError::Value(v) => format!("{v:?}"),
        CaughtError::Error(e) => e.to_string(),
    }
}

/// An error of an engine call: a JavaScript exception (or an allocation that failed: the
/// script's heap is full) is the script's; anything else the engine's.
fn engine<'js>(ctx: &Ctx<'js>, e: rquickjs::Error) -> RunError {
    match e {
        rquickjs::Error::Exception | rquickjs::Error::Allocation => {
            match Err::<(), _>(e).catch(ctx) {
                Err(caught) => thrown(ctx, &caught),
                Ok(()) => RunError::Engine("an exception that vanished".into()),
            }
        }
        e => RunError::Engine(e.to_string()),
    }
}
