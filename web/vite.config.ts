import { defineConfig } from 'vitest/config';
import react from '@vitejs/plugin-react';

// The Python package serves the built UI from src/tokenpipe/server/static (generated, gitignored).
const backend = process.env.TOKENPIPE_URL ?? 'http://127.0.0.1:8000';

export default defineConfig({
  base: './',
  plugins: [react()],
  build: {
    outDir: '../src/tokenpipe/server/static',
    emptyOutDir: true,
    target: 'es2022',
    chunkSizeWarningLimit: 600,
  },
  server: {
    proxy: {
      '/ws': { target: backend, ws: true, changeOrigin: false },
      '/v1': { target: backend, changeOrigin: false },
    },
  },
  test: {
    environment: 'node',
    include: ['src/**/*.test.{ts,tsx}'],
  },
});
