# Runs on the image-snapshot builder (Bottlerocket, through SSM AWS-RunShellScript in its control container):
# pulls each image given as an argument into containerd's k8s.io namespace, the store the kubelet reads, then
# checks that every one is listed there. Arguments: fully qualified references (docker.io/library/x:1).
# The CRI plugin treats an image as its own only with the io.cri-containerd.image=managed label (as
# aws-samples/bottlerocket-images-cache pulls them).
set -eu
RETRIES="${RETRIES:-4}"
BACKOFF_SECONDS="${BACKOFF_SECONDS:-15}"
PLATFORM="${PLATFORM:-linux/amd64}"
SOCKET=/run/containerd/containerd.sock

host() { apiclient exec admin sheltie "$@"; }

if [ "$#" -eq 0 ]; then
  echo "pull-images: no image given" >&2
  exit 64
fi
case "$RETRIES" in ''|*[!0-9]*|0) echo "pull-images: RETRIES must be a positive integer" >&2; exit 64 ;; esac

# Without a cluster the kubelet only restarts in a loop; stopped, it cannot garbage-collect what is pulled.
host systemctl stop kubelet || true

for image in "$@"; do
  attempt=1
  until host ctr -a "$SOCKET" -n k8s.io images pull --label io.cri-containerd.image=managed \
      --platform "$PLATFORM" "$image"; do
    if [ "$attempt" -ge "$RETRIES" ]; then
      echo "pull-images: $image failed $attempt times" >&2
      exit 1
    fi
    sleep $((attempt * BACKOFF_SECONDS))
    attempt=$((attempt + 1))
  done
  echo "pull-images: pulled $image (attempt $attempt)"
done

listed="$(host ctr -a "$SOCKET" -n k8s.io images ls -q)"
for image in "$@"; do
  if ! printf '%s\n' "$listed" | grep -qxF "$image"; then
    echo "pull-images: $image is not in the k8s.io namespace after pulling" >&2
    exit 1
  fi
done
host sync
echo "pull-images: $# images in the store"
