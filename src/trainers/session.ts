/**
 * A learner session: the one object through which training talks to the learner, local (a child
 * process) or remote (`--learner <url>`). Typed by the contract (protocol.ts): `train`,
 * `exportWeights`, `saveCheckpoint`, and `recover` (a learner that died is restarted and
 * reloaded from the last checkpoint). It owns the restarts and the file shipping: a remote
 * learner may not share this file system, so the model directory is sent to it (`put_files`),
 * each export comes back in the answer and is written here, and its checkpoints stay on its side.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { basename, join, posix, resolve } from 'node:path';
import { HttpLearnerClient, isHfModelDir, LearnerClient, LearnerError, type LearnerConnection } from './learner-client.ts';
import type { LearnerArgs, LearnerConfigInput, LearnerResult, TrainBatch } from './protocol.ts';
import { StartFailure } from '../../lib/index.ts';

export interface LearnerSessionOptions {
  /** The model directory the rollouts sample from; the learner trains it and writes it back. */
  modelDir: string;
  /** Where checkpoints go (`<runDir>/checkpoints`; remote: the same relative place on the learner's side). */
  runDir: string;
  /** URL of a learner started with `serve --http` elsewhere; default: a local process. */
  url?: string;
  token?: string;
  device?: 'cpu' | 'cuda';
  threads?: number;
  /**
   * A remote learner that reads and writes this run's paths itself (a file system both machines
   * mount at the same path, as on a cluster): nothing is shipped, exports and checkpoints are
   * written in place.
   */
  sharedFs?: boolean;
  /** Local learner processes under torchrun, and DDP or FSDP2 between them (LearnerOptions). */
  procs?: number;
  parallel?: 'ddp' | 'fsdp';
  /**
   * For a Hugging Face model: the learner's dtype, gradient checkpointing and LoRA (`load`'s
   * fields; config.ts hfLoadOptions). Ignored for the embedded GPT model.
   */
  hf?: Pick<LearnerArgs<'load'>, 'dtype' | 'gradient_checkpointing' | 'compute_dtype' | 'lora'>;
  /** The checkpoint to start from (a resumed run's). */
  checkpoint?: string;
  log?: (line: string) => void;
}

const MODEL_FILES = ['config.json', 'weights.pt', 'model.onnx', 'model.onnx.data'];

export class LearnerSession {
  /** Restarts after the learner died. */
  restarts = 0;
  /** The last checkpoint saved or restored (a restart reloads it). */
  checkpoint?: string;
  private conn!: LearnerConnection;
  private learnerModelDir: string;
  private learnerCheckpoints: string;

  private constructor(private readonly o: LearnerSessionOptions) {
    // a learner on a shared file system reads the same paths: absolute ones
    this.learnerModelDir = resolve(o.modelDir);
    this.learnerCheckpoints = join(resolve(o.runDir), 'checkpoints');
    this.checkpoint = o.checkpoint;
  }

  /** Starts (or reaches) the learner, loads the model and, if given, the checkpoint. */
  /** Starts the learner and loads the model (and the checkpoint); a failure there is a StartFailure (exit 3). */
  static async open(o: LearnerSessionOptions): Promise<LearnerSession> {
    const s = new LearnerSession(o);
    try {
      await s.start();
    } catch (err) {
      await s.conn?.close().catch(() => {});
      throw new StartFailure(`could not start the learner with the model ${o.modelDir}${o.url ? ` at ${o.url}` : ''}: ${(err as Error).message}`);
    }
    return s;
  }

  get remote(): boolean {
    return this.o.url !== undefined;
  }

  /** A remote learner without a shared file system: the model goes over the wire, exports come back inline. */
  private get ships(): boolean {
    return this.remote && !this.o.sharedFs;
  }

  /** The connection (for tests and tools: e.g. to kill a local learner). */
  get connection(): LearnerConnection {
    return this.conn;
  }

  private async start(): Promise<void> {
    const hf = isHfModelDir(this.o.modelDir);
    this.conn = this.o.url
      ? new HttpLearnerClient(this.o.url, this.o.token)
      : LearnerClient.start({ threads: this.o.threads, hf, procs: this.o.procs, parallel: this.o.parallel });
    if (this.ships) await this.shipModel();
    await this.conn.request('load', {
      model_dir: this.learnerModelDir,
      ...(this.o.device ? { device: this.o.device } : {}),
      // torchrun's ranks share this machine's cores: each gets its part (of `threads`, else of the cores)
      ...this.threadsOfRank(),
      ...(hf && this.o.hf ? this.o.hf : {}),
    });
    if (this.checkpoint) await this.conn.request('checkpoint_load', { dir: this.checkpoint });
  }

  private threadsOfRank(): { threads?: number } {
    const procs = Math.max(1, this.o.procs ?? 1);
    if (procs === 1 || this.remote) return this.o.threads ? { threads: this.o.threads } : {};
    return { threads: Math.max(1, Math.floor((this.o.threads ?? availableParallelism()) / procs)) };
  }

  /** Sends the model directory to a remote learner; its files land under a directory named after this run. */
  private async shipModel(): Promise<void> {
    const dir = this.o.modelDir;
    const files = Object.fromEntries(MODEL_FILES.filter((f) => existsSync(join(dir, f))).map((f) => [f, readFileSync(join(dir, f)).toString('base64')]));
    const id = `${basename(this.o.runDir).replace(/[^A-Za-z0-9._-]/g, '_')}-${createHash('sha256').update(this.o.runDir).digest('hex').slice(0, 8)}`;
    const put = await this.conn.request('put_files', { dir: `runs/${id}/model`, files });
    this.learnerModelDir = put.dir;
    this.learnerCheckpoints = posix.join(posix.dirname(put.dir), 'checkpoints');
  }

  /** One RL step. */
  async train(batch: TrainBatch, config: LearnerConfigInput): Promise<LearnerResult<'train'>> {
    return this.conn.request('train', { batch, config });
  }

  /** The learner writes the new weights into the model directory (remote: sends them; written here data first, config.json last). */
  async exportWeights(): Promise<void> {
    const r = await this.conn.request('export', { model_dir: this.learnerModelDir, ...(this.ships ? { inline: true } : {}) });
    if (!this.ships) return;
    const names = Object.keys(r.files ?? {}).sort((a, b) => Number(a === 'config.json') - Number(b === 'config.json'));
    if (!names.includes('config.json')) throw new LearnerError('export: the remote learner sent no config.json');
    for (const name of names) {
      writeFileSync(join(this.o.modelDir, name + '.tmp'), Buffer.from(r.files![name]!, 'base64'));
      renameSync(join(this.o.modelDir, name + '.tmp'), join(this.o.modelDir, name));
    }
  }

  /**
   * Saves a checkpoint of `step`, then calls `commit(dir)` (the run records it: state.json), then
   * removes the previous local checkpoint. A kill at any point leaves a recorded checkpoint.
   */
  async saveCheckpoint(step: number, commit: (dir: string) => void): Promise<string> {
    const name = `step-${String(step).padStart(5, '0')}`;
    const dir = this.ships ? posix.join(this.learnerCheckpoints, name) : join(this.learnerCheckpoints, name);
    await this.conn.request('checkpoint_save', { dir });
    const previous = this.checkpoint;
    this.checkpoint = dir;
    commit(dir);
    if (previous && previous !== dir && !this.ships) rmSync(previous, { recursive: true, force: true });
    return dir;
  }

  /**
   * Whether `err` says the learner died; if so it is restarted from the last checkpoint (or from
   * the model directory before the first), and true is returned: the caller rolls back to that
   * checkpoint. Any other error: false, nothing done.
   */
  async recover(err: unknown, what: string, checkpoint = this.checkpoint): Promise<boolean> {
    if (!(err instanceof LearnerError) || this.conn.alive) return false;
    this.restarts++;
    this.o.log?.(`the learner died during ${what} (${err.message.slice(0, 160)}); restarting it from ${checkpoint ?? 'the start of the run'}`);
    await this.conn.close().catch(() => {});
    this.checkpoint = checkpoint;
    await this.start();
    return true;
  }

  async close(): Promise<void> {
    await this.conn?.close().catch(() => {});
  }
}
