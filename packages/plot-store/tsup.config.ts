import { packageBuild } from '../../tsup.shared.ts';

// `.` is the pure policy half and `./file` the value file (Node's fs only): no run-time path to native or the
// engine. `./native` is the lookup on the native addon; `./build` runs the engine's lower layers to compute values.
export default packageBuild({
  index: 'src/index.ts',
  file: 'src/file/index.ts',
  native: 'src/native/index.ts',
  build: 'src/builder/index.ts',
});
