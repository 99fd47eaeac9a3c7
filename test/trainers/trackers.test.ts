/**
 * `--report-to wandb,tensorboard,mlflow`: a real training run through the CLI, then what each
 * tracker wrote read back with its own official reader (TensorBoard's EventAccumulator, MLflow's
 * MlflowClient over the file store, wandb's offline run file read as the LevelDB-log of wandb Record
 * protobufs it is) in the learner's venv, and compared
 * with the run's metrics.jsonl and evaluations. The first run installs the trackers' packages
 * (learner/requirements-trackers.lock) into the venv.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUNDLED_MODEL_DIR, PACKAGE_ROOT } from '../../src/paths.ts';
import { parseReportTo } from '../../src/trainers/options.ts';
import { runCli } from '../helpers.ts';

const VENV = join(PACKAGE_ROOT, '.venv', 'bin', 'python');
const READ_BACK = String.raw`
import glob, json, os, sys
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
run = sys.argv[1]
out = {}
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(os.path.join(run, "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
ea.Reload()
out["tb"] = {t: [[e.step, e.value] for e in ea.Scalars(t)] for t in ("reward_mean", "success_rate", "eval/success")}
out["tb_text"] = sorted(ea.Tags()["tensors"])
from mlflow.tracking import MlflowClient
import pathlib
c = MlflowClient(pathlib.Path(run, "mlruns").resolve().as_uri())
exp = c.get_experiment_by_name("mcp-gym")
r = c.search_runs([exp.experiment_id])[0]
out["mlflow"] = {k: [[m.step, m.value] for m in c.get_metric_history(r.info.run_id, k)] for k in ("reward_mean", "eval/success")}
out["mlflow_params"] = {k: r.data.params[k] for k in ("preset", "steps", "report_to")}
out["mlflow_artifacts"] = sorted(a.path for a in c.list_artifacts(r.info.run_id, "eval_trajectories"))
from wandb.proto import wandb_internal_pb2
import struct
def wandb_records(path):
    # W&B's offline run file: a 7-byte header (":W&B", 0xBEE1, version 0), then LevelDB-log records in
    # 32 KiB blocks (crc32, length, type FULL 1 / FIRST 2 / MIDDLE 3 / LAST 4), each a wandb Record protobuf.
    data = open(path, "rb").read()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1, "not a W&B run file"
    pos, pending, block = 7, b"", 32768
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:
            pos += room
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            break
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
files = glob.glob(os.path.join(run, "wandb", "offline-run-*", "run-*.wandb"))
history, config, tables = [], {}, 0
for f in files:
    for data in wandb_records(f):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
            history.append(items)
            tables += sum(1 for k, v in items.items() if k.endswith("/_type") and v == "table-file")
        elif kind == "config":
            for i in rec.config.update:
                config[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
out["wandb_files"] = len(files)
out["wandb"] = [[h.get("_step"), h.get("reward_mean"), h.get("eval/success")] for h in history]
out["wandb_config"] = {k: config.get(k, {}).get("value") if isinstance(config.get(k), dict) else config.get(k) for k in ("preset", "steps")}
out["wandb_tables"] = tables
print(json.dumps(out))
`;

describe('experiment trackers (--report-to)', () => {
  it('parses the list and names an unknown tracker', () => {
    expect(parseReportTo('wandb, tensorboard,wandb')).toEqual(['wandb', 'tensorboard']);
    expect(parseReportTo('none')).toEqual([]);
    expect(() => parseReportTo('wandb,comet')).toThrow("report_to: unknown tracker 'comet' (known: wandb, tensorboard, mlflow; comma-separated)");
  });

  it('a training run reports its config, curves, evaluations and sample trajectories to wandb (offline), TensorBoard and MLflow, read back by their own readers', async (ctx) => {
    if (!existsSync(VENV)) {
      console.warn(`skipped: the learner's venv (${VENV}) is missing; scripts/ensure.mjs makes it`);
      ctx.skip();
      return;
    }
    const run = join(mkdtempSync(join(tmpdir(), 'mcp-gym-trackers-')), 'run');
    const r = await runCli([
      'train',
      '--suite',
      'calculator',
      '--max-difficulty',
      '1',
      '--steps',
      '3',
      '--tasks-per-step',
      '4',
      '--group',
      '4',
      '--eval-limit',
      '6',
      '--eval-samples',
      '1',
      '--eval-every',
      '2',
      '--model',
      BUNDLED_MODEL_DIR,
      '--run',
      run,
      '--report-to',
      'wandb,tensorboard,mlflow',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('reporting to wandb, tensorboard, mlflow');
    const back = spawnSync(VENV, ['-c', READ_BACK, run], { encoding: 'utf8' });
    expect(back.status, back.stderr).toBe(0);
    const got = JSON.parse(back.stdout.trim().split('\n').pop()!) as {
      tb: Record<string, [number, number][]>;
      tb_text: string[];
      mlflow: Record<string, [number, number][]>;
      mlflow_params: Record<string, string>;
      mlflow_artifacts: string[];
      wandb_files: number;
      wandb: [number, number | undefined, number | undefined][];
      wandb_config: Record<string, unknown>;
      wandb_tables: number;
    };
    const rows = readFileSync(join(run, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { step: number; reward_mean: number; success_rate: number });
    const evals = readFileSync(join(run, 'eval.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { step: number; success: number });
    expect(rows.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(evals.map((e) => e.step)).toEqual([0, 2, 3]);
    // TensorBoard (float32 scalars)
    expect(got.tb.reward_mean!.map(([s]) => s)).toEqual([1, 2, 3]);
    got.tb.reward_mean!.forEach(([, v], i) => expect(v).toBeCloseTo(rows[i]!.reward_mean, 5));
    expect(got.tb['eval/success']!.map(([s, v]) => [s, Math.round(v * 1e6) / 1e6])).toEqual(evals.map((e) => [e.step, Math.round(e.success * 1e6) / 1e6]));
    expect(got.tb_text).toEqual(expect.arrayContaining(['config/text_summary', 'eval_trajectories/text_summary']));
    // MLflow
    expect(got.mlflow.reward_mean).toEqual(rows.map((m) => [m.step, m.reward_mean]));
    expect(got.mlflow['eval/success']).toEqual(evals.map((e) => [e.step, e.success]));
    expect(got.mlflow_params).toEqual({ preset: 'art', steps: '3', report_to: 'wandb,tensorboard,mlflow' });
    expect(got.mlflow_artifacts).toEqual(['eval_trajectories/step-00000.json', 'eval_trajectories/step-00002.json', 'eval_trajectories/step-00003.json']);
    // wandb, offline
    expect(got.wandb_files).toBe(1);
    const byStep = new Map<number, { reward?: number; evalSuccess?: number }>();
    for (const [s, rw, ev] of got.wandb) {
      const x = byStep.get(s) ?? {};
      if (rw !== undefined && rw !== null) x.reward = rw;
      if (ev !== undefined && ev !== null) x.evalSuccess = ev;
      byStep.set(s, x);
    }
    for (const m of rows) expect(byStep.get(m.step)?.reward).toBeCloseTo(m.reward_mean, 12);
    for (const e of evals) expect(byStep.get(e.step)?.evalSuccess).toBeCloseTo(e.success, 12);
    expect(got.wandb_config).toEqual({ preset: 'art', steps: 3 });
    expect(got.wandb_tables).toBe(3);
  }, 600_000);
});
