// "Lambda containers" for the soak: worker processes (./worker.ts) that run the unchanged handlers,
// one invocation at a time each, and that the soak SIGKILLs. A killed container fails its invocation
// (the event source then treats the whole batch as failed, as Lambda does) and the next invocation
// gets a cold one.
import { fork, type ChildProcess } from 'node:child_process';
import type { WriteStream } from 'node:fs';
import path from 'node:path';
import type { InvokeMessage, KillPoint, WorkerReply } from './worker.ts';

export const KILL_POINTS: readonly KillPoint[] = ['before_claim', 'after_claim', 'in_flight', 'after_answer'];
/** A kill at a random moment of an invocation, by the parent (not aimed at a step). */
export type KillKind = KillPoint | 'random_moment';

export interface ContainerCounters {
  invocations: number;
  coldStarts: number;
  /** Kills that happened, by where they struck. A planned kill whose point the invocation never reached did not happen. */
  kills: Record<KillKind, number>;
  /** Kills planned (an invocation without a Stripe call never reaches after_claim…). */
  killsPlanned: Record<KillKind, number>;
  handlerErrors: number;
  /** Containers that died without being killed by the soak (a crash of the handler itself). */
  unexpectedExits: number;
}

export class ContainerKilled extends Error {
  override readonly name = 'ContainerKilled';
}

interface Container {
  readonly child: ChildProcess;
  readonly ready: Promise<void>;
  exited: boolean;
  /** The invocation running in it, and how it ends if the process goes away. */
  pending: { id: number; resolve: (reply: WorkerReply) => void; reject: (error: Error) => void } | null;
  killedByParent: boolean;
  dyingAt: KillPoint | null;
}

export interface KillPlan {
  readonly killAt: KillPoint | null;
  /** Parent SIGKILLs the container this long after the invocation started. */
  readonly killAfterMs: number | null;
}

export class ContainerPool {
  readonly #fn: 'charge' | 'reconcile';
  readonly #env: NodeJS.ProcessEnv;
  readonly #log: WriteStream | null;
  readonly #idle: Container[] = [];
  readonly #all = new Set<Container>();
  #nextId = 1;
  #stopped = false;
  readonly counters: ContainerCounters;

  constructor(fn: 'charge' | 'reconcile', env: NodeJS.ProcessEnv, log: WriteStream | null) {
    this.#fn = fn;
    this.#env = env;
    this.#log = log;
    const zero = () => ({ before_claim: 0, after_claim: 0, in_flight: 0, after_answer: 0, random_moment: 0 });
    this.counters = { invocations: 0, coldStarts: 0, kills: zero(), killsPlanned: zero(), handlerErrors: 0, unexpectedExits: 0 };
  }

  #spawn(): Container {
    const child = fork(path.join(import.meta.dirname, 'worker.ts'), [], {
      env: { ...this.#env, SOAK_WORKER_FN: this.#fn },
      execArgv: ['--no-warnings'],
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      serialization: 'advanced',
    });
    // Not pipe(): dozens of short-lived children would pile listeners onto one stream.
    const sink = this.#log;
    child.stdout?.on('data', (chunk: Buffer) => sink?.write(chunk));
    child.stderr?.on('data', (chunk: Buffer) => sink?.write(chunk));
    this.counters.coldStarts += 1;
    const ready = Promise.withResolvers<void>();
    const container: Container = { child, ready: ready.promise, exited: false, pending: null, killedByParent: false, dyingAt: null };
    child.on('message', (reply: WorkerReply) => {
      if (reply.type === 'ready') ready.resolve();
      else if (reply.type === 'dying') container.dyingAt = reply.point;
      else if (container.pending?.id === reply.id) {
        const pending = container.pending;
        container.pending = null;
        pending.resolve(reply);
      }
    });
    child.on('exit', (code, signal) => {
      container.exited = true;
      this.#all.delete(container);
      const idle = this.#idle.indexOf(container);
      if (idle >= 0) this.#idle.splice(idle, 1);
      ready.reject(new ContainerKilled(`container exited before it was ready (${signal ?? code})`));
      if (container.pending) {
        const pending = container.pending;
        container.pending = null;
        pending.reject(new ContainerKilled(`container ${child.pid} ${signal ? `killed by ${signal}` : `exited with ${code}`}`));
      }
    });
    ready.promise.catch(() => {});
    this.#all.add(container);
    return container;
  }

  /** One invocation in an idle (or new) container; rejects with ContainerKilled if it is killed. */
  async invoke(event: unknown, remainingMs: number, plan: KillPlan): Promise<unknown> {
    if (this.#stopped) throw new ContainerKilled('pool stopped');
    let container = this.#idle.pop();
    while (container?.exited) container = this.#idle.pop();
    container ??= this.#spawn();
    await container.ready;
    const id = this.#nextId++;
    this.counters.invocations += 1;
    if (plan.killAt) this.counters.killsPlanned[plan.killAt] += 1;
    if (plan.killAfterMs !== null) this.counters.killsPlanned.random_moment += 1;
    const c = container;
    const reply = new Promise<WorkerReply>((resolve, reject) => {
      c.pending = { id, resolve, reject };
    });
    let timer: NodeJS.Timeout | undefined;
    if (plan.killAfterMs !== null) {
      timer = setTimeout(() => {
        if (c.pending?.id === id && !c.exited) {
          c.killedByParent = true;
          c.child.kill('SIGKILL');
        }
      }, plan.killAfterMs);
    }
    // A container that replied and then died (a kill after its answer) can be idle here before its
    // 'exit' arrives: the send fails with ERR_IPC_CHANNEL_CLOSED — a killed container, not an error
    // for the process (without a callback Node emits it as an 'error' nobody listens to: uncaught).
    c.child.send({ type: 'invoke', id, fn: this.#fn, event, remainingMs, killAt: plan.killAt } satisfies InvokeMessage, (error) => {
      if (error && c.pending?.id === id) {
        const pending = c.pending;
        c.pending = null;
        pending.reject(new ContainerKilled(`container ${c.child.pid} gone before the invocation was sent (${error.message})`));
      }
    });
    try {
      const result = await reply;
      if (result.type !== 'result') throw new Error('unexpected reply');
      this.#idle.push(c);
      if (!result.ok) {
        this.counters.handlerErrors += 1;
        throw new Error(result.error);
      }
      return result.value;
    } catch (error) {
      if (error instanceof ContainerKilled) {
        // Attribute the death: a planned point (the worker said so, or the plan was the only way to die
        // by SIGKILL without the parent), the parent's random moment, or something unexpected.
        const signal = c.child.signalCode;
        if (c.killedByParent) this.counters.kills.random_moment += 1;
        else if (signal === 'SIGKILL' && (c.dyingAt ?? plan.killAt)) this.counters.kills[(c.dyingAt ?? plan.killAt)!] += 1;
        else if (!this.#stopped) this.counters.unexpectedExits += 1;
      }
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Kill every container (the end of the soak). */
  async stop(): Promise<void> {
    this.#stopped = true;
    const exits = [...this.#all].map((c) => new Promise<void>((resolve) => (c.exited ? resolve() : c.child.once('exit', () => resolve()))));
    for (const c of this.#all) c.child.kill('SIGKILL');
    await Promise.all(exits);
  }
}
