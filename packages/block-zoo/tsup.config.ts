import { packageBuild } from '../../tsup.shared.ts';

// `.` is the pure planner (no run-time path to native or the engine); store, ingest and fit use them.
export default packageBuild({
  index: 'src/planner/index.ts',
  store: 'src/store/index.ts',
  ingest: 'src/ingest/index.ts',
  fit: 'src/fit/index.ts',
  chain: 'src/chain/index.ts',
});
