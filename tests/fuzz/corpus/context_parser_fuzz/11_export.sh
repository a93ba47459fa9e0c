export A='x'
export	B=y
  export C="z"
export='n'
