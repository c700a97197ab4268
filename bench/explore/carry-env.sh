# Sourced by the device scripts here: the CUDA toolkit on PATH, the carried Debian packages
# (scripts/carry-deps.sh unpacks them in .carry/root) for the compiler and the loader, and $cfg,
# the CMake arguments of a Release build with the CUDA backend against them.
export PATH=/usr/local/cuda/bin:$PATH
root=$PWD/.carry/root
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu
export CPATH=$root/usr/include PYTHONPATH=$root/usr/lib/python3/dist-packages
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_WITH_CUDA=ON -DCMAKE_PREFIX_PATH=$root/usr"
cfg="$cfg -DCMAKE_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu -DCMAKE_INCLUDE_PATH=$root/usr/include"
export cfg
