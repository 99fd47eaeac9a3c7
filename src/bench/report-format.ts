/** Formatting shared by the bench report's renderings: numbers, percentages, and the fuzz outcomes' labels and order. */
import type { Outcome } from './fuzz-classify.ts';

export const OUTCOME_LABEL: Record<Outcome, string> = {
  rejected: 'rejected',
  accepted: 'accepted',
  protocol_error: 'protocol error',
  crash: 'crash',
  hang: 'hang',
};
export const OUTCOME_ORDER: Outcome[] = ['rejected', 'accepted', 'protocol_error', 'crash', 'hang'];

export function fmt(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  if (a >= 1000) return x.toFixed(0);
  if (a >= 100) return x.toFixed(1);
  if (a >= 1) return x.toFixed(2);
  return x.toFixed(3);
}

export const pct = (x: number) => `${(100 * x).toFixed(x > 0 && x < 0.001 ? 3 : 1)}%`;
