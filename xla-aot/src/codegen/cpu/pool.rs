//! An in-process parallel-for for the JIT (`xla-aot profile --threads N`): the hook a
//! generated library's `<name>_set_parallel_for` takes, run on `N - 1` spinning worker threads
//! and the calling thread, optionally recording when each task ran on which thread.
//!
//! Contract: [`SpinPool::hook`] keeps the hook contract of `parallel.rs` (every `task(ctx, i)`,
//! `i < n`, called exactly once, on the calling thread or a worker, and the call returns when
//! all have returned). A call claims its tasks through one atomic counter tagged with the call's
//! generation, closed while the next call is published, so a worker still finishing one call can
//! never claim a task of the next with the previous call's function. Workers spin (then yield) between calls, like bench/harness.c's
//! pool: waking a sleeping thread would cost more than most kernels. With tracing on
//! ([`SpinPool::trace`]), every task's thread and start and end (nanoseconds since the given
//! origin) are recorded; thread 0 is the calling thread.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// `task(task_ctx, i)`: one task of a kernel (`parallel.rs`).
pub type Task = unsafe extern "C" fn(*mut std::ffi::c_void, u32);

/// The hook's C type (`XlaAotParallelFor`).
pub type ParallelFor =
    unsafe extern "C" fn(*mut std::ffi::c_void, u32, Task, *mut std::ffi::c_void);

/// Spins of an idle worker before it starts yielding its core between checks: 2^20 `pause`s,
/// milliseconds, longer than any gap between two kernels of a run, so only a worker the runs no
/// longer need yields. With 512 (a microsecond) the worker yielded between kernels and, on a
/// machine busy with other work, ran 2 of alexnet's 26 tasks.
const SPINS_BEFORE_YIELD: u32 = 1 << 20;

/// The task index of a call being published: nothing can be claimed.
const CLOSED: u32 = u32::MAX;

/// One task's run: on `thread` (0 = the caller), from `start` to `end` nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSpan {
    pub thread: usize,
    pub start: u64,
    pub end: u64,
}

struct Shared {
    /// `generation << 32 | next task index` of the current call.
    claim: AtomicU64,
    task: AtomicUsize,
    task_ctx: AtomicPtr<std::ffi::c_void>,
    n: AtomicU32,
    done: AtomicU32,
    stop: AtomicBool,
    /// Tracing origin (`Some` while tracing) and each thread's spans.
    origin: Mutex<Option<Instant>>,
    tracing: AtomicBool,
    spans: Vec<Mutex<Vec<TaskSpan>>>,
}

impl Shared {
    /// Claims and runs tasks of the current call until none is left; `thread` is the runner.
    fn work(&self, thread: usize, origin: Option<Instant>) {
        loop {
            let c = self.claim.load(Ordering::Acquire);
            let i = (c & u32::MAX as u64) as u32;
            let n = self.n.load(Ordering::Acquire);
            let task = self.task.load(Ordering::Acquire);
            let ctx = self.task_ctx.load(Ordering::Acquire);
            if i == CLOSED {
                // The next call is being published.
                std::hint::spin_loop();
                continue;
            }
            if i >= n || task == 0 {
                return;
            }
            if self
                .claim
                .compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // SAFETY: the claim succeeded while the call that published `task`, `ctx` and `n`
            // was still current (its tasks are not all done), so they belong to it; `task` is
            // the `Task` the library passed for this call.
            let task: Task = unsafe { std::mem::transmute::<usize, Task>(task) };
            let t0 = origin.map(|o| o.elapsed().as_nanos() as u64);
            // SAFETY: the hook contract: `task(ctx, i)` for a claimed `i < n`.
            unsafe { task(ctx, i) };
            if let Some(start) = t0 {
                let end = origin.unwrap().elapsed().as_nanos() as u64;
                if let Ok(mut s) = self.spans[thread].lock() {
                    s.push(TaskSpan { thread, start, end });
                }
            }
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn origin(&self) -> Option<Instant> {
        if self.tracing.load(Ordering::Acquire) {
            self.origin.lock().ok().and_then(|o| *o)
        } else {
            None
        }
    }
}

/// A pool of `threads - 1` workers plus the calling thread.
pub struct SpinPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
}

impl SpinPool {
    /// A pool running tasks on `threads` threads (the caller included; at least 1).
    pub fn new(threads: usize) -> SpinPool {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            claim: AtomicU64::new(0),
            task: AtomicUsize::new(0),
            task_ctx: AtomicPtr::new(std::ptr::null_mut()),
            n: AtomicU32::new(0),
            done: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            origin: Mutex::new(None),
            tracing: AtomicBool::new(false),
            spans: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
        });
        let workers = (1..threads)
            .map(|t| {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let mut spins = 0u32;
                    let mut seen = 0u64;
                    while !s.stop.load(Ordering::Acquire) {
                        let g = s.claim.load(Ordering::Acquire) >> 32;
                        if g != seen {
                            seen = g;
                            spins = 0;
                            s.work(t, s.origin());
                        } else if spins < SPINS_BEFORE_YIELD {
                            spins += 1;
                            std::hint::spin_loop();
                        } else {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        SpinPool {
            shared,
            workers,
            threads,
        }
    }

    /// Threads tasks run on (the caller included).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The hook and its context for `<name>_set_parallel_for(hook, ctx, threads())`; valid while
    /// the pool lives.
    pub fn hook(&self) -> (ParallelFor, *mut std::ffi::c_void) {
        (run_hook, Arc::as_ptr(&self.shared) as *mut std::ffi::c_void)
    }

    /// Starts recording task spans, in nanoseconds since `origin` (`None`: stops); clears the
    /// spans recorded so far.
    pub fn trace(&self, origin: Option<Instant>) {
        if let Ok(mut o) = self.shared.origin.lock() {
            *o = origin;
        }
        for s in &self.shared.spans {
            if let Ok(mut s) = s.lock() {
                s.clear();
            }
        }
        self.shared
            .tracing
            .store(origin.is_some(), Ordering::Release);
    }

    /// The spans recorded since [`SpinPool::trace`], by thread, then start.
    pub fn spans(&self) -> Vec<TaskSpan> {
        let mut all: Vec<TaskSpan> = self
            .shared
            .spans
            .iter()
            .filter_map(|s| s.lock().ok().map(|s| s.clone()))
            .flatten()
            .collect();
        all.sort_by_key(|s| (s.thread, s.start));
        all
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// The hook: publishes the call, runs tasks on the calling thread too, waits for all `n`.
unsafe extern "C" fn run_hook(
    ctx: *mut std::ffi::c_void,
    n: u32,
    task: Task,
    task_ctx: *mut std::ffi::c_void,
) {
    // SAFETY: `ctx` is the `Shared` of a live pool (`SpinPool::hook`).
    let s = unsafe { &*(ctx as *const Shared) };
    // Close the claims first: a worker that read the previous call's claim fails its claim.
    let g = (s.claim.load(Ordering::Acquire) >> 32) + 1;
    s.claim.store(g << 32 | CLOSED as u64, Ordering::Release);
    s.done.store(0, Ordering::Release);
    s.n.store(n, Ordering::Release);
    s.task.store(task as usize, Ordering::Release);
    s.task_ctx.store(task_ctx, Ordering::Release);
    s.claim.store(g << 32, Ordering::Release);
    s.work(0, s.origin());
    while s.done.load(Ordering::Acquire) < n {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each task sleeps a millisecond and records its index.
    unsafe extern "C" fn sleepy(ctx: *mut std::ffi::c_void, i: u32) {
        // SAFETY: `ctx` is the test's counters.
        let hits = unsafe { &*(ctx as *const Vec<AtomicU32>) };
        std::thread::sleep(std::time::Duration::from_millis(1));
        hits[i as usize].fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn every_task_runs_once_and_the_workers_take_some() {
        let pool = SpinPool::new(3);
        let (hook, ctx) = pool.hook();
        let origin = Instant::now();
        pool.trace(Some(origin));
        for n in [3u32, 1, 2, 3, 3] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            // SAFETY: `sleepy` with the counters, which outlive the call.
            unsafe { hook(ctx, n, sleepy, &hits as *const _ as *mut std::ffi::c_void) };
            assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
        }
        let spans = pool.spans();
        assert_eq!(spans.len(), 12);
        assert!(spans.iter().any(|s| s.thread > 0), "{spans:?}");
        assert!(spans.iter().all(|s| s.start <= s.end));
    }
}
