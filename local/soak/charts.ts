// The soak's figures as SVG charts (`npm run soak -- --svg-dir <dir>`): what it did to the pipeline
// (faults, kills) and where every operation ended, from the same report formatSoakReport prints.
import { renderBarChart } from '../../bench/svg-chart.ts';
import type { SoakReport } from './soak.ts';

export function renderSoakCharts(r: SoakReport): { name: string; svg: string }[] {
  const what = `npm run soak, ${r.orders} orders, seed ${r.seed}: ${r.ok ? 'PASS' : 'FAIL'}, ${r.check.violations.length} violations`;
  const inReview = Object.values(r.reviewReasons).reduce((a, b) => a + b, 0);
  const rows = (o: Readonly<Record<string, number>>) =>
    Object.entries(o)
      .filter(([, n]) => n > 0)
      .sort((a, b) => b[1] - a[1])
      .map(([label, n]) => ({ label, values: [n] }));
  return [
    {
      name: 'soak-faults.svg',
      svg: renderBarChart({
        title: 'The chaos soak: faults injected',
        description: `Stripe faults by kind, EventBridge faults, SIGKILLs by point and PostgreSQL restarts and crashes; ${what}.`,
        unit: '',
        series: [{ name: 'count' }],
        rows: [
          ...rows(r.stripeFaults).map((x) => ({ ...x, label: `Stripe: ${x.label}` })),
          ...rows(r.eventBridgeFaults).map((x) => ({ ...x, label: `EventBridge: ${x.label}` })),
          ...rows(r.kills).map((x) => ({ ...x, label: `SIGKILL: ${x.label}` })),
          { label: 'PostgreSQL: clean restarts', values: [r.postgres.restarts] },
          { label: 'PostgreSQL: crashes', values: [r.postgres.crashes] },
        ],
      }),
    },
    {
      name: 'soak-outcomes.svg',
      svg: renderBarChart({
        title: 'The chaos soak: where every operation ended',
        description: `Operations by final state (in review: waiting for a person), and violations of the checker's invariants; ${what}.`,
        unit: '',
        series: [{ name: 'operations' }],
        rows: [
          { label: 'succeeded', values: [r.check.byStatus.succeeded] },
          { label: 'failed', values: [r.check.byStatus.failed] },
          { label: 'in review', values: [inReview] },
          { label: 'open, not in review', values: [r.check.byStatus.pending + r.check.byStatus.unknown - inReview] },
          { label: 'violations', values: [r.check.violations.length] },
        ],
      }),
    },
  ];
}
